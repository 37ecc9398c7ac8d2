// Bounded, printable renderings of untrusted input for rejection reasons, log lines and headers
// (the dead letter's Kvidx-Reason). One helper for every place that quotes input, so no reason or
// log line grows with the input: a 1 MiB string or a 100,001-digit number is quoted as its first
// ~200 bytes plus its length.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvidx {

inline constexpr std::size_t kExcerptBytes = 200;
// Cap of a whole reason (its own words plus excerpts): what a log line or a header may carry.
inline constexpr std::size_t kReasonBytes = 512;

// `untrusted` as at most `max_bytes` bytes of printable ASCII: \n, \r and \t as those two-character
// escapes, every other byte outside 0x20..0x7e as \xNN (so the result is one line and a valid
// header value). When it does not fit, the head that does is followed by "... (N bytes)", N the
// input's total length. Input that fits and needs no escape comes back unchanged.
std::string untrusted_excerpt(std::string_view untrusted, std::size_t max_bytes = kExcerptBytes);

}  // namespace kvidx
