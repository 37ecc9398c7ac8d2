#include "replay/event_log_reader.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "replay/gz_input.h"
#include "replay/parallel_log_reader.h"

namespace kvidx {

namespace {

std::string open_error(const std::string& path) {
  return fmt::format("{}: cannot open: {}", path, std::strerror(errno));
}

// NOTE: the buffer each read() fills, sized to stay in a core's L2 cache (512 KiB on the bench's
// EPYC): the kernel's copy into it and the decoder's pass over it then stay out of L3. With 1 MiB,
// that copy took a quarter of the reading thread's time in a replay of the bench's 1.27 GiB log
// (the thread that bounds it); with 128 KiB, about 6% of it.
constexpr std::size_t kReadBytes = std::size_t{128} << 10;

// for_each_line over an input already open.
std::string read_lines(GzInput& input, const std::string& path,
                       const std::function<bool(std::uint64_t, std::string_view)>& on_line, std::uint64_t* bytes_read,
                       ReadPosition* position) {
  std::string pending;
  std::vector<char> buffer(kReadBytes);
  std::uint64_t line_number = 0;
  std::uint64_t total = 0;
  std::string error;
  while (true) {
    const long n = input.read(buffer.data(), static_cast<unsigned>(buffer.size()), error);
    if (n < 0) return fmt::format("{}: read error: {}", path, error);
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
    if (position != nullptr) position->file_bytes = input.offset();
    std::string_view chunk(buffer.data(), static_cast<std::size_t>(n));
    while (!chunk.empty()) {
      const auto newline = chunk.find('\n');
      if (newline == std::string_view::npos) {
        pending.append(chunk);
        break;
      }
      ++line_number;
      bool go_on = true;
      if (pending.empty()) {
        go_on = on_line(line_number, chunk.substr(0, newline));
      } else {
        pending.append(chunk.substr(0, newline));
        go_on = on_line(line_number, pending);
        pending.clear();
      }
      if (!go_on) {
        if (bytes_read != nullptr) *bytes_read = total;
        return {};
      }
      chunk.remove_prefix(newline + 1);
    }
  }
  if (!pending.empty()) on_line(++line_number, pending);  // last line without a newline
  if (bytes_read != nullptr) *bytes_read = total;
  return {};
}

}  // namespace

std::string for_each_line(const std::string& path, const std::function<bool(std::uint64_t, std::string_view)>& on_line,
                          std::uint64_t* bytes_read, ReadPosition* position) {
  GzInput input(path);
  if (!input.is_open()) return open_error(path);
  if (position != nullptr) *position = ReadPosition{0, input.size()};
  return read_lines(input, path, on_line, bytes_read, position);
}

EventLogReadResult read_event_log(const std::string& path, BadLinePolicy policy, const EventLogCallback& on_event,
                                  const DecodeLimits& limits) {
  EventLogReadOptions options;
  options.limits = limits;
  return read_event_log(path, policy, on_event, options);
}

EventLogReadResult read_event_log(const std::string& path, BadLinePolicy policy, const EventLogCallback& on_event,
                                  const EventLogReadOptions& options) {
  GzInput input(path);
  if (!input.is_open()) {
    EventLogReadResult failed;
    failed.error = open_error(path);
    return failed;
  }
  if (options.position != nullptr) *options.position = ReadPosition{0, input.size()};
  const std::size_t threads =
      options.choose_decode_threads ? options.choose_decode_threads(input.compressed()) : options.decode_threads;
  if (threads > 0) return read_event_log_parallel(input, path, threads, policy, on_event, options);
  EventLogReadResult result;
  auto& stats = result.stats;
  const DecodeLimits& limits = options.limits;
  EventLogLine decoded;
  std::string reason;
  std::string io_error = read_lines(
      input, path,
      [&](std::uint64_t line_number, std::string_view line) {
        if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) {
          result.stopped = true;
          return false;
        }
        const LineOutcome outcome = decode_log_line(line, limits, decoded, reason);
        if (outcome == LineOutcome::blank) return true;  // blank lines are ignored
        ++stats.lines;
        if (outcome == LineOutcome::bad) {
          ++stats.bad_lines;
          if (stats.first_bad_lines.size() < EventLogReadStats::kMaxReportedBadLines) {
            stats.first_bad_lines.push_back({line_number, reason});
          }
          if (policy == BadLinePolicy::stop) {
            result.error = fmt::format("{}:{}: {}", path, line_number, reason);
            return false;
          }
          return true;
        }
        ++stats.events;
        on_event(std::move(decoded));
        return true;
      },
      &stats.bytes, options.position);
  // NOTE: a signal that stopped the read may also have failed a blocking read (EINTR): that is
  // the stop, not an I/O error.
  if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) result.stopped = true;
  if (!io_error.empty() && !result.stopped) result.error = std::move(io_error);
  return result;
}

LineOutcome decode_log_line(std::string_view line, const DecodeLimits& limits, EventLogLine& out, std::string& reason) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return LineOutcome::blank;
  auto decoded = decode_event_log_line(line, limits);
  if (!decoded.ok()) {
    reason = decoded.error().message();
    return LineOutcome::bad;
  }
  out = std::move(decoded).value();
  return LineOutcome::event;
}

std::string check_input_file(const std::string& path) {
  if (path == "-") return {};
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return fmt::format("{}: cannot open: {}", path, std::strerror(errno));
  if (S_ISDIR(info.st_mode)) return fmt::format("{}: cannot read: is a directory", path);
  if (::access(path.c_str(), R_OK) != 0) return fmt::format("{}: cannot open: {}", path, std::strerror(errno));
  return {};
}

}  // namespace kvidx
