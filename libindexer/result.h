// Errors as values across every kvidx library (no exceptions across a module's API): a
// Result<T, E> holds the value or the error that prevented it, a Status<E> only the error, if
// any. Each library names its error type once (codec: CodecError, libbus: BusError, lanes:
// ObservationError, bridge sinks: a message) and an alias for it (Decoded<T>, BusResult<T> /
// BusStatus, ObservationOutcome<T>, SinkStatus); they are all this one type.
#pragma once

#include <optional>
#include <utility>
#include <variant>

namespace kvidx {

template <class T, class E>
class Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(E error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  // Throw std::bad_variant_access when called on the other alternative.
  T& value() & { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const T& value() const& { return std::get<0>(state_); }
  const E& error() const { return std::get<1>(state_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, E> state_;
};

template <class E>
class Status {
 public:
  Status() = default;
  Status(E error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const E& error() const { return *error_; }

 private:
  std::optional<E> error_;
};

}  // namespace kvidx
