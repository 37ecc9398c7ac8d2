// Errors as values at the codec boundary (LevelDB's Status habit): decoding never throws.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace kvidx {

// Why a message was rejected: `field` is the JSON path of the offending value ("event.event_id",
// "[3].event.data.stored.blocks[0].block_hash"), empty for document-level errors.
struct CodecError {
  std::string field;
  std::string reason;

  std::string message() const { return field.empty() ? reason : field + ": " + reason; }
};

template <class T>
class Decoded {
 public:
  Decoded(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Decoded(CodecError error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const T& value() const& { return std::get<0>(state_); }
  const CodecError& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, CodecError> state_;
};

}  // namespace kvidx
