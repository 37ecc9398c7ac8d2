#include "libcodec/json_reader.h"

#include <fmt/format.h>

#include <cctype>
#include <limits>

namespace kvidx::json_reader {

void fail(Kind kind, std::string field, std::string reason) {
  throw JsonFieldError{CodecError{std::move(field), std::move(reason), kind}};
}

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
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return deepest;
}

bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Where the top-level value of `text` ends: after its closing bracket or quote, or after the last
// character that can belong to a number or literal. A lexical scan only (nlohmann validates the
// value itself); npos when `text` does not start like a value, so the parser reports that.
// NOTE: needed because nlohmann's lexer takes a NUL byte for the end of input, so it accepted
// `{...}\0garbage` as a complete document.
std::size_t top_level_value_end(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && is_json_space(text[i])) ++i;
  if (i == text.size()) return std::string_view::npos;
  const char first = text[i];
  if (first == '{' || first == '[' || first == '"') {
    std::size_t depth = 0;
    bool in_string = false;
    bool escaped = false;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (in_string) {
        if (escaped)
          escaped = false;
        else if (c == '\\')
          escaped = true;
        else if (c == '"') {
          in_string = false;
          if (depth == 0) return i + 1;  // a top-level string
        }
        continue;
      }
      if (c == '"')
        in_string = true;
      else if (c == '{' || c == '[')
        ++depth;
      else if ((c == '}' || c == ']') && --depth == 0)
        return i + 1;
    }
    return text.size();  // unterminated: the parser says what is missing
  }
  const std::size_t start = i;
  while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) != 0 || text[i] == '-' ||
                             text[i] == '+' || text[i] == '.')) {
    ++i;
  }
  return i == start ? std::string_view::npos : i;
}

// nlohmann's message without its "[json.exception...] " prefix, with the token it quotes
// ("last read: '...'", "number overflow parsing '...'": the whole offending token, which can be
// megabytes) cut to a bounded excerpt.
std::string bounded_parser_message(std::string what) {
  if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
  const auto open = what.find('\'');
  const auto close = what.rfind('\'');
  if (open == std::string::npos || close <= open) return untrusted_excerpt(what, kReasonBytes);
  const std::string_view token(what.data() + open + 1, close - open - 1);
  return untrusted_excerpt(what.substr(0, open + 1), kReasonBytes) + untrusted_excerpt(token) +
         untrusted_excerpt(what.substr(close), kReasonBytes);
}

Json parse_value(std::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    // parse_error (syntax) and out_of_range (a number overflowing a double) alike.
    fail(Kind::bad_json, "", "invalid JSON: " + bounded_parser_message(e.what()));
  }
}

}  // namespace

Json parse_document(std::string_view text, std::size_t max_bytes, std::size_t max_depth) {
  if (text.size() > max_bytes) {
    fail(Kind::limit, "", fmt::format("message of {} bytes exceeds the limit of {} bytes", text.size(), max_bytes));
  }
  // NOTE: checked before parsing so hostile nesting never reaches the recursive DOM code.
  if (nesting_depth(text, max_depth) > max_depth) {
    fail(Kind::limit, "", fmt::format("JSON nesting deeper than {} levels", max_depth));
  }
  const std::size_t end = top_level_value_end(text);
  std::size_t trailing = end;
  while (trailing < text.size() && is_json_space(text[trailing])) ++trailing;
  if (end == std::string_view::npos || trailing == text.size()) return parse_value(text);
  // Something follows the value: a broken value is reported as such first, then the extra bytes.
  static_cast<void>(parse_value(text.substr(0, end)));
  fail(Kind::bad_json, "",
       fmt::format("invalid JSON: trailing bytes after the JSON value at offset {}: {}", trailing,
                   untrusted_excerpt(text.substr(trailing), 32)));
}

const Json* find(const Json& object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

const Json& require(const Json& object, std::string_view key, std::string_view path) {
  const Json* value = find(object, key);
  if (value == nullptr) fail(Kind::missing_field, join(path, key), "missing required field");
  return *value;
}

void require_object(const Json& value, std::string_view path) {
  if (!value.is_object())
    fail(Kind::wrong_type, std::string(path), fmt::format("expected an object, got {}", type_name(value)));
}

std::uint64_t read_u64(const Json& value, std::string_view path) {
  // NOTE: nlohmann keeps non-negative integers up to 2^64-1 exact as number_unsigned; anything
  // negative, fractional or larger arrives as another type and is rejected here.
  if (!value.is_number_unsigned()) {
    fail(Kind::wrong_type, std::string(path),
         fmt::format("expected an unsigned 64-bit integer, got {}", type_name(value)));
  }
  return value.get<std::uint64_t>();
}

std::uint32_t read_u32(const Json& value, std::string_view path) {
  if (!value.is_number_unsigned()) {
    fail(Kind::wrong_type, std::string(path),
         fmt::format("expected an unsigned 32-bit integer, got {}", type_name(value)));
  }
  const auto wide = value.get<std::uint64_t>();
  if (wide > std::numeric_limits<std::uint32_t>::max()) {
    fail(Kind::wrong_type, std::string(path), fmt::format("value {} does not fit an unsigned 32-bit integer", wide));
  }
  return static_cast<std::uint32_t>(wide);
}

std::string read_string(const Json& value, std::string_view path) {
  if (!value.is_string())
    fail(Kind::wrong_type, std::string(path), fmt::format("expected a string, got {}", type_name(value)));
  return value.get<std::string>();
}

}  // namespace kvidx::json_reader
