#include "libbus/codec/json_reader.h"

#include <fmt/format.h>

#include <limits>

namespace kvidx::json_reader {

void fail(std::string field, std::string reason) { throw JsonFieldError{CodecError{std::move(field), std::move(reason)}}; }

std::string join(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

std::string join(std::string_view parent, std::size_t index) { return fmt::format("{}[{}]", parent, index); }

std::string_view type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::string: return "string";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer: return "negative integer";
    case Json::value_t::number_unsigned: return "unsigned integer";
    case Json::value_t::number_float: return "non-integer or out-of-range number";
    default: return "unsupported value";
  }
}

namespace {

// Deepest [ / { nesting outside strings; bails out early once past `limit`.
std::size_t nesting_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  return deepest;
}

}  // namespace

Json parse_document(std::string_view text, std::size_t max_bytes, std::size_t max_depth) {
  if (text.size() > max_bytes) {
    fail("", fmt::format("message of {} bytes exceeds the limit of {} bytes", text.size(), max_bytes));
  }
  // NOTE: checked before parsing so hostile nesting never reaches the recursive DOM code.
  if (nesting_depth(text, max_depth) > max_depth) {
    fail("", fmt::format("JSON nesting deeper than {} levels", max_depth));
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // nlohmann prefixes "[json.exception.parse_error.101] "; keep the readable part.
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    fail("", "invalid JSON: " + what);
  }
}

const Json* find(const Json& object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

const Json& require(const Json& object, std::string_view key, std::string_view path) {
  const Json* value = find(object, key);
  if (value == nullptr) fail(join(path, key), "missing required field");
  return *value;
}

void require_object(const Json& value, std::string_view path) {
  if (!value.is_object()) fail(std::string(path), fmt::format("expected an object, got {}", type_name(value)));
}

std::uint64_t read_u64(const Json& value, std::string_view path) {
  // NOTE: nlohmann keeps non-negative integers up to 2^64-1 exact as number_unsigned; anything
  // negative, fractional or larger arrives as another type and is rejected here.
  if (!value.is_number_unsigned()) {
    fail(std::string(path), fmt::format("expected an unsigned 64-bit integer, got {}", type_name(value)));
  }
  return value.get<std::uint64_t>();
}

std::uint32_t read_u32(const Json& value, std::string_view path) {
  if (!value.is_number_unsigned()) {
    fail(std::string(path), fmt::format("expected an unsigned 32-bit integer, got {}", type_name(value)));
  }
  const auto wide = value.get<std::uint64_t>();
  if (wide > std::numeric_limits<std::uint32_t>::max()) {
    fail(std::string(path), fmt::format("value {} does not fit an unsigned 32-bit integer", wide));
  }
  return static_cast<std::uint32_t>(wide);
}

std::string read_string(const Json& value, std::string_view path) {
  if (!value.is_string()) fail(std::string(path), fmt::format("expected a string, got {}", type_name(value)));
  return value.get<std::string>();
}

}  // namespace kvidx::json_reader
