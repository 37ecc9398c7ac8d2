#include "replay/event_log_reader.h"

#include <fmt/format.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvidx {
namespace {

// RAII over a zlib gzFile. NOTE: gzread passes plain (non-gzip) input through unchanged, which is
// how ".gz is read transparently" works for any file name.
class GzInput {
 public:
  explicit GzInput(const std::string& path) {
    const int fd = path == "-" ? dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat info {};
    if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) size_ = static_cast<std::uint64_t>(info.st_size);
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      return;
    }
    gzbuffer(file_, 1 << 20);
  }
  ~GzInput() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzInput(const GzInput&) = delete;
  GzInput& operator=(const GzInput&) = delete;

  bool is_open() const { return file_ != nullptr; }
  // Reads up to `size` bytes; returns bytes read, 0 at end, -1 on error (message in `error`).
  long read(char* buffer, unsigned size, std::string& error) {
    const int n = gzread(file_, buffer, size);
    if (n < 0) {
      int code = 0;
      const char* text = gzerror(file_, &code);
      error = code == Z_ERRNO ? std::strerror(errno) : text;
    }
    return n;
  }
  // Bytes of the input consumed so far, as stored (compressed for gzip).
  std::uint64_t offset() const {
    const auto at = gzoffset(file_);
    return at < 0 ? 0 : static_cast<std::uint64_t>(at);
  }
  std::uint64_t size() const { return size_; }  // 0: not a regular file

 private:
  gzFile file_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace

std::string for_each_line(const std::string& path, const std::function<bool(std::uint64_t, std::string_view)>& on_line,
                          std::uint64_t* bytes_read, ReadPosition* position) {
  GzInput input(path);
  if (!input.is_open()) return fmt::format("{}: cannot open: {}", path, std::strerror(errno));
  if (position != nullptr) *position = ReadPosition{0, input.size()};
  std::string pending;
  std::vector<char> buffer(1 << 20);
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

EventLogReadResult read_event_log(const std::string& path, BadLinePolicy policy, const EventLogCallback& on_event,
                                  const DecodeLimits& limits) {
  EventLogReadOptions options;
  options.limits = limits;
  return read_event_log(path, policy, on_event, options);
}

EventLogReadResult read_event_log(const std::string& path, BadLinePolicy policy, const EventLogCallback& on_event,
                                  const EventLogReadOptions& options) {
  EventLogReadResult result;
  auto& stats = result.stats;
  const DecodeLimits& limits = options.limits;
  std::string io_error = for_each_line(
      path,
      [&](std::uint64_t line_number, std::string_view line) {
        if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) {
          result.stopped = true;
          return false;
        }
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) return true;  // blank lines are ignored
        ++stats.lines;
        auto decoded = decode_event_log_line(line, limits);
        if (!decoded.ok()) {
          ++stats.bad_lines;
          if (stats.first_bad_lines.size() < EventLogReadStats::kMaxReportedBadLines) {
            stats.first_bad_lines.push_back({line_number, decoded.error().message()});
          }
          if (policy == BadLinePolicy::stop) {
            result.error = fmt::format("{}:{}: {}", path, line_number, decoded.error().message());
            return false;
          }
          return true;
        }
        ++stats.events;
        on_event(std::move(decoded).value());
        return true;
      },
      &stats.bytes, options.position);
  // NOTE: a signal that stopped the read may also have failed a blocking read (EINTR): that is
  // the stop, not an I/O error.
  if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) result.stopped = true;
  if (!io_error.empty() && !result.stopped) result.error = std::move(io_error);
  return result;
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
