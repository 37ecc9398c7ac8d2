// The event-log reader with decoding spread over threads (read_event_log with decode threads
// lands here):
//   calling thread  reads (and inflates) the input in 1 MiB blocks and cuts them into chunks of
//                   whole lines;
//   decode threads  decode whole chunks, any chunk on any thread;
//   a hand-on thread  takes the chunks back in input order and hands their events to the callback
//                   (always from that one thread).
// So the callback sees exactly what the sequential reader would hand it, in the same order, and
// bad lines are counted and reported with the same line numbers and reasons.
#pragma once

#include <string>
#include <string_view>

#include "replay/event_log_reader.h"
#include "replay/gz_input.h"

namespace kvidx {

// One line as both readers judge it (a trailing '\r' dropped, blank = only spaces and tabs); on
// `bad`, `reason` holds the decoder's message.
enum class LineOutcome { blank, event, bad };
LineOutcome decode_log_line(std::string_view line, const DecodeLimits& limits, EventLogLine& out, std::string& reason);

// Reads the open `input` (named `path` in messages) with `threads` decode threads (> 0).
EventLogReadResult read_event_log_parallel(GzInput& input, const std::string& path, std::size_t threads,
                                           BadLinePolicy policy, const EventLogCallback& on_event,
                                           const EventLogReadOptions& options);

}  // namespace kvidx
