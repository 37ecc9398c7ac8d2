// Fast path of the RouterEvent decoder: a hand-written single pass over the bytes (no DOM), used by
// decode_router_event(s) and decode_event_log_line before the strict nlohmann decoder.
//
// Contract (checked by tests/codec/fast_event_parser_test.cpp against the DOM decoder on the wire
// corpus, the codec tests' documents and a randomized mutation run):
//   - returns true only for documents the DOM decoder accepts, with `out` equal to its result;
//   - returns false ("not sure") for every rejection and for any construct it does not handle
//     itself (duplicate known keys, escapes in keys or known strings, non-ASCII strings, lone
//     surrogates, numbers with exponents in unknown fields, a UTF-8 BOM, ...). The caller then runs
//     the DOM decoder, so error messages are exactly the DOM decoder's.
// `out` holds unspecified partial content after a false return.
#pragma once

#include <string_view>
#include <vector>

#include "libcodec/event_codec.h"

namespace kvidx::fast_codec {

bool try_decode_router_event(std::string_view json, const DecodeLimits& limits, RouterEvent& out);
// Appends the decoded events to `out` (cleared first).
bool try_decode_router_events(std::string_view json, const DecodeLimits& limits, std::vector<RouterEvent>& out);
bool try_decode_event_log_line(std::string_view line, const DecodeLimits& limits, EventLogLine& out);

}  // namespace kvidx::fast_codec
