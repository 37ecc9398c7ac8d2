// Typed, path-aware field access over nlohmann::json for the codec's decoders, also used by the
// other readers of untrusted JSON (replay's query file, the service's routing decisions and
// lifecycle messages) so every document follows the same rules. A failed read throws
// JsonFieldError, which every public decode function catches and turns into a CodecError.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "libcodec/codec_result.h"
#include "libcodec/untrusted_text.h"

namespace kvidx::json_reader {

using Json = nlohmann::json;
using Kind = CodecErrorKind;

struct JsonFieldError {
  CodecError error;
};

[[noreturn]] void fail(Kind kind, std::string field, std::string reason);

std::string join(std::string_view parent, std::string_view key);
std::string join(std::string_view parent, std::size_t index);
std::string_view type_name(const Json& value);

// Parse one document. Errors: more than `max_bytes`, nesting above `max_depth`, bad syntax, and
// anything but whitespace after the value ("trailing bytes after the JSON value at offset N",
// NUL bytes included). Quoted input in the reasons is a bounded excerpt (untrusted_text.h).
Json parse_document(std::string_view text, std::size_t max_bytes, std::size_t max_depth);

const Json& require(const Json& object, std::string_view key, std::string_view path);
const Json* find(const Json& object, std::string_view key);  // null for absent

void require_object(const Json& value, std::string_view path);
std::uint64_t read_u64(const Json& value, std::string_view path);
std::uint32_t read_u32(const Json& value, std::string_view path);
std::string read_string(const Json& value, std::string_view path);

// Runs a decode step and turns any failure into a CodecError: the codec's promise that nothing
// throws past its boundary is kept here, for every decoder.
template <class F>
auto guarded(F&& decode) -> Decoded<decltype(decode())> {
  try {
    return decode();
  } catch (const JsonFieldError& e) {
    return e.error;
  } catch (const std::exception& e) {
    return CodecError{"", "unexpected decoder failure: " + untrusted_excerpt(e.what()), Kind::bad_json};
  }
}

}  // namespace kvidx::json_reader
