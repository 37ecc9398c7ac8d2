#include "libcodec/untrusted_text.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvidx {
namespace {

// The rendering of one byte: itself, or a 2- or 4-character escape.
std::size_t escaped(unsigned char c, char (&out)[4]) {
  switch (c) {
    case '\n':
      out[0] = '\\';
      out[1] = 'n';
      return 2;
    case '\r':
      out[0] = '\\';
      out[1] = 'r';
      return 2;
    case '\t':
      out[0] = '\\';
      out[1] = 't';
      return 2;
    default: break;
  }
  if (c >= 0x20 && c <= 0x7e) {
    out[0] = static_cast<char>(c);
    return 1;
  }
  constexpr char kHex[] = "0123456789abcdef";
  out[0] = '\\';
  out[1] = 'x';
  out[2] = kHex[c >> 4];
  out[3] = kHex[c & 0xf];
  return 4;
}

// Appends the rendering of `text` to `out` while it fits in `budget` bytes; returns whether all did.
bool render(std::string_view text, std::size_t budget, std::string& out) {
  char piece[4];
  for (const char c : text) {
    const std::size_t n = escaped(static_cast<unsigned char>(c), piece);
    if (out.size() + n > budget) return false;  // never half an escape
    out.append(piece, n);
  }
  return true;
}

}  // namespace

std::string untrusted_excerpt(std::string_view untrusted, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(untrusted.size(), max_bytes));
  if (render(untrusted, max_bytes, out)) return out;
  // Too long: a shorter head, so that head + "... (N bytes)" fits in max_bytes (a budget too small
  // for any head still gets the suffix: it is what says that bytes were left out).
  const std::string suffix = fmt::format("... ({} bytes)", untrusted.size());
  out.clear();
  render(untrusted, max_bytes > suffix.size() ? max_bytes - suffix.size() : 0, out);
  out += suffix;
  return out;
}

}  // namespace kvidx
