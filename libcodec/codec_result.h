// Errors as values at the codec boundary (LevelDB's Status habit): decoding never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "libindexer/result.h"

namespace kvidx {

// What kind of problem a rejection is: a small fixed set, so it can label a counter
// (kvidx_queries_rejected_total{reason}); the free text stays in CodecError::reason.
enum class CodecErrorKind : std::uint8_t {
  bad_json,       // not one well-formed JSON document (syntax, trailing bytes, number overflow)
  limit,          // over a configured bound (message bytes, nesting, blocks, events, hashes)
  missing_field,  // a required field is absent
  wrong_type,     // a field has the wrong JSON type or a number out of its range
  invalid_value,  // well-typed but not allowed (unknown variant or tier, block_size 0, ...)
};
inline constexpr std::size_t kCodecErrorKinds = 5;

constexpr std::string_view to_string(CodecErrorKind kind) {
  switch (kind) {
    case CodecErrorKind::bad_json: return "bad_json";
    case CodecErrorKind::limit: return "limit";
    case CodecErrorKind::missing_field: return "missing_field";
    case CodecErrorKind::wrong_type: return "wrong_type";
    case CodecErrorKind::invalid_value: return "invalid_value";
  }
  return "invalid_value";
}

// Why a message was rejected: `field` is the JSON path of the offending value ("event.event_id",
// "[3].event.data.stored.blocks[0].block_hash"), empty for document-level errors. Any piece of the
// input quoted in `reason` is a bounded excerpt (untrusted_text.h), so a reason stays short
// whatever the input.
struct CodecError {
  std::string field;
  std::string reason;
  CodecErrorKind kind = CodecErrorKind::invalid_value;

  std::string message() const { return field.empty() ? reason : field + ": " + reason; }
};

// What every decoder returns: the value or the CodecError (libindexer/result.h).
template <class T>
using Decoded = Result<T, CodecError>;

}  // namespace kvidx
