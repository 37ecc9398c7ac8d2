// Reads an event log: JSON Lines of RouterEvents (bare or in the capture wrapper), plain or gzip
// (detected from the bytes, not the name), from a file or "-" for stdin. Blank lines are skipped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libcodec/event_codec.h"

namespace kvidx {

struct BadLine {
  std::uint64_t line_number = 0;
  std::string reason;
};

// What to do with a line that does not decode.
enum class BadLinePolicy {
  skip,  // count it, keep the first few reasons, go on
  stop,  // stop reading; the error is reported as "file:line: reason"
};

struct EventLogReadStats {
  std::uint64_t lines = 0;   // non-blank lines seen
  std::uint64_t events = 0;  // events handed to the callback
  std::uint64_t bad_lines = 0;
  std::vector<BadLine> first_bad_lines;  // at most kMaxReportedBadLines
  std::uint64_t bytes = 0;               // decompressed bytes read
  static constexpr std::size_t kMaxReportedBadLines = 5;
};

// Calls `on_event` for each decoded line, in file order. Returns the stats; on an I/O failure or,
// with BadLinePolicy::stop, on the first bad line, `error` holds one line for the user.
struct EventLogReadResult {
  EventLogReadStats stats;
  std::string error;
  bool stopped = false;            // EventLogReadOptions::stop turned true before the end of the input
  std::size_t decode_threads = 0;  // what the read used (EventLogReadOptions::choose_decode_threads)
  bool ok() const { return error.empty(); }
};

// How far a read is, for progress lines: bytes of the input consumed so far as stored (compressed
// bytes for gzip) and the input's size when it is a regular file (0: unknown, e.g. a pipe).
struct ReadPosition {
  std::uint64_t file_bytes = 0;
  std::uint64_t file_size = 0;
};

struct EventLogReadOptions {
  DecodeLimits limits;
  // Checked before every line: once true, reading stops there and the result says `stopped`.
  const std::atomic<bool>* stop = nullptr;
  ReadPosition* position = nullptr;  // updated after every block read from the input
  // 0: lines are decoded on the calling thread. N > 0: the calling thread reads (and inflates)
  // the input, N threads decode chunks of lines, and one other thread calls the callback with
  // every event in input order (parallel_log_reader.h); bad lines are reported exactly as with 0.
  std::size_t decode_threads = 0;
  // When set, it decides decode_threads once the input is open and its first bytes are read:
  // the argument says whether the input is gzip (a file or stdin alike; `kvidx replay --decode-threads auto`).
  std::function<std::size_t(bool gzip)> choose_decode_threads;
};

using EventLogCallback = std::function<void(EventLogLine&&)>;

EventLogReadResult read_event_log(const std::string& path, BadLinePolicy policy, const EventLogCallback& on_event,
                                  const DecodeLimits& limits = {});
EventLogReadResult read_event_log(const std::string& path, BadLinePolicy policy, const EventLogCallback& on_event,
                                  const EventLogReadOptions& options);

// Reads any JSON Lines file line by line (plain or gzip, "-" for stdin). `on_line` gets the line
// number (1-based) and the text without its newline; returning false stops reading.
// Returns an error line, or empty on success.
std::string for_each_line(const std::string& path, const std::function<bool(std::uint64_t, std::string_view)>& on_line,
                          std::uint64_t* bytes_read = nullptr, ReadPosition* position = nullptr);

// Checks, without opening it (a FIFO would block), that `path` names something a read can start
// on: "-" (stdin), or an existing, readable file that is not a directory. Empty when it is,
// otherwise one line for the user ("queries.jsonl: cannot open: No such file or directory").
std::string check_input_file(const std::string& path);

}  // namespace kvidx
