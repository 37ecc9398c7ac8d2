// RouterEvent JSON in Dynamo's serde shape (docs/wire-format.md), strictly validated.
// nlohmann/json stays inside the .cpp files so including this header stays cheap.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libcodec/codec_result.h"
#include "libindexer/protocol.h"

namespace kvidx {

// Limits applied while decoding untrusted input; exceeding one is a rejection that names it.
struct DecodeLimits {
  std::size_t max_message_bytes = 8u << 20;
  std::size_t max_blocks_per_event = 1u << 20;
  std::size_t max_events_per_batch = 1u << 16;
  std::size_t max_nesting_depth = 32;
};

// One RouterEvent object.
Decoded<RouterEvent> decode_router_event(std::string_view json, const DecodeLimits& limits = {});
// One RouterEvent object or a JSON array of them (a batch, in order).
Decoded<std::vector<RouterEvent>> decode_router_events(std::string_view json, const DecodeLimits& limits = {});

// Canonical wire JSON: dp_rank always written, storage_tier and start_position only when set.
std::string encode_router_event(const RouterEvent& event);
void append_router_event(std::string& out, const RouterEvent& event);
std::string encode_router_events(std::span<const RouterEvent> events);  // a JSON array

// A line of an event log: the bare wire event, or the capture wrapper {"ts", "subject", "event"}.
struct EventLogLine {
  std::optional<double> ts;
  std::optional<std::string> subject;
  RouterEvent event;
};
Decoded<EventLogLine> decode_event_log_line(std::string_view line, const DecodeLimits& limits = {});

// The three decoders above try a single-pass parser first (fast_event_parser.h) and fall back to
// these strict DOM (nlohmann) decoders for anything it is not sure about, so every rejection and
// its message come from here. Exposed as the reference the fast path is tested against.
Decoded<RouterEvent> decode_router_event_dom(std::string_view json, const DecodeLimits& limits = {});
Decoded<std::vector<RouterEvent>> decode_router_events_dom(std::string_view json, const DecodeLimits& limits = {});
Decoded<EventLogLine> decode_event_log_line_dom(std::string_view line, const DecodeLimits& limits = {});
std::string encode_event_log_line(const EventLogLine& line);

}  // namespace kvidx
