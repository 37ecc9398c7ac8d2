// Errors as values for every nats.c call made through libbus: a failed call becomes a BusError
// carrying the nats.c status, its text (natsStatus_GetText) and the library's last-error detail
// (nats_GetLastError), prefixed by what kvidx was doing. Nothing in libbus throws across its API.
#pragma once

#include <nats/nats.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvidx::bus {

struct BusError {
  natsStatus status = NATS_ERR;
  std::string message;  // "<context>: <status text> (<last error detail>)"

  bool timed_out() const { return status == NATS_TIMEOUT; }
};

// Builds a BusError from a failed nats.c status; call right after the failing call so
// nats_GetLastError still describes it (it is thread-local in nats.c).
BusError nats_error(natsStatus status, std::string_view context);
// Same, with a JetStream API error code when the server gave one.
BusError js_error(natsStatus status, jsErrCode code, std::string_view context);

// Outcome of an operation without a value.
class BusStatus {
 public:
  BusStatus() = default;
  BusStatus(BusError error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const BusError& error() const { return *error_; }

 private:
  std::optional<BusError> error_;
};

// Outcome of an operation producing a T.
template <class T>
class BusResult {
 public:
  BusResult(T value) : state_(std::move(value)) {}            // NOLINT(google-explicit-constructor)
  BusResult(BusError error) : state_(std::move(error)) {}     // NOLINT(google-explicit-constructor)

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const T& value() const& { return std::get<0>(state_); }
  const BusError& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, BusError> state_;
};

}  // namespace kvidx::bus
