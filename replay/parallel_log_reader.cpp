#include "replay/parallel_log_reader.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "libindexer/thread_name.h"
#include "replay/gz_input.h"

namespace kvidx {
namespace {

constexpr std::size_t kReadBlock = 1 << 20;

// A chunk's text: the reader inflates or reads into it directly. NOTE: not a std::string, whose
// resize would zero each megabyte before the read overwrites it.
struct ChunkText {
  std::unique_ptr<char[]> data;
  std::size_t capacity = 0;
  std::size_t size = 0;

  ChunkText() = default;
  // Invariant: capacity is the size of data's allocation, so a moved-from text has none.
  ChunkText(ChunkText&& other) noexcept
      : data(std::move(other.data)), capacity(std::exchange(other.capacity, 0)), size(std::exchange(other.size, 0)) {}
  ChunkText& operator=(ChunkText&& other) noexcept {
    data = std::move(other.data);
    capacity = std::exchange(other.capacity, 0);
    size = std::exchange(other.size, 0);
    return *this;
  }
  ChunkText(const ChunkText&) = delete;
  ChunkText& operator=(const ChunkText&) = delete;
  ~ChunkText() = default;

  std::string_view view() const { return {data.get(), size}; }
  // Room for `bytes`; the contents are kept only when nothing had to be allocated.
  void reserve_fresh(std::size_t bytes) {
    if (capacity >= bytes) return;
    data.reset(new char[bytes]);  // NOTE: default-initialised: no zeroing
    capacity = bytes;
  }
};

// Whole lines of the input (the last one may lack its newline) and, once decoded, what they held.
struct Chunk {
  ChunkText text;
  std::uint64_t file_bytes = 0;  // ReadPosition::file_bytes after the read that completed it
  // Decoding results.
  struct Bad {
    std::size_t events_before = 0;  // events of this chunk that come before the bad line
    std::uint64_t line = 0;         // 1-based line number within the chunk
    std::string reason;
  };
  std::vector<EventLogLine> events;
  std::vector<Bad> bad;
  std::uint64_t line_count = 0;  // lines in the chunk, blank ones included
  bool claimed = false;          // a decode thread took it
  bool decoded = false;
};

void decode_chunk(Chunk& chunk, const DecodeLimits& limits) {
  std::string_view rest = chunk.text.view();
  EventLogLine line;
  std::string reason;
  // NOTE: sized for the typical line (~100 bytes and up) so the vector rarely grows.
  chunk.events.reserve(rest.size() / 128 + 1);
  while (!rest.empty()) {
    const auto newline = rest.find('\n');
    const std::string_view text = rest.substr(0, newline);
    rest.remove_prefix(newline == std::string_view::npos ? rest.size() : newline + 1);
    ++chunk.line_count;
    switch (decode_log_line(text, limits, line, reason)) {
      case LineOutcome::blank: break;
      case LineOutcome::event: chunk.events.push_back(std::move(line)); break;
      case LineOutcome::bad: chunk.bad.push_back({chunk.events.size(), chunk.line_count, std::move(reason)}); break;
    }
  }
}

// The chunks between the reader and the calling thread, in input order. NOTE: at most `window`
// chunks are in flight, which bounds memory whatever the relative speeds.
class ChunkWindow {
 public:
  explicit ChunkWindow(std::size_t window) : window_(window) {}

  // Reader: waits for room; false once cancelled.
  bool push(std::unique_ptr<Chunk> chunk) {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return cancelled_ || chunks_.size() < window_; });
    if (cancelled_) return false;
    chunks_.push_back(std::move(chunk));
    work_.notify_one();
    return true;
  }
  // Reader: no more chunks; `error` (empty: none) is reported after the last one.
  void finish(std::string error) {
    std::lock_guard lock(mutex_);
    finished_ = true;
    error_ = std::move(error);
    work_.notify_all();
    ready_.notify_all();
  }
  // Decode threads: the oldest chunk nobody decodes yet, or null once there will be none.
  Chunk* claim() {
    std::unique_lock lock(mutex_);
    while (true) {
      if (cancelled_) return nullptr;
      for (auto& chunk : chunks_) {
        if (!chunk->claimed) {
          chunk->claimed = true;
          return chunk.get();
        }
      }
      if (finished_) return nullptr;
      work_.wait(lock);
    }
  }
  // Decode threads: the chunk's text has been decoded; the text's buffer goes back to the reader.
  void decoded(Chunk* chunk) {
    std::lock_guard lock(mutex_);
    chunk->decoded = true;
    if (spare_texts_.size() < window_) spare_texts_.push_back(std::move(chunk->text));
    ready_.notify_all();
  }
  // Reader: a buffer a decoded chunk gave back (empty if none). NOTE: a reused megabyte is already
  // mapped; a fresh one page-faults as the read fills it, and cost the reader ~8% of a gzip replay.
  ChunkText spare_text() {
    std::lock_guard lock(mutex_);
    if (spare_texts_.empty()) return {};
    ChunkText text = std::move(spare_texts_.back());
    spare_texts_.pop_back();
    return text;
  }
  // Calling thread: the next chunk in input order once decoded; null at the end (then `error`).
  std::unique_ptr<Chunk> next(std::string& error) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return (!chunks_.empty() && chunks_.front()->decoded) || (finished_ && chunks_.empty()); });
    if (chunks_.empty()) {
      error = error_;
      return nullptr;
    }
    auto chunk = std::move(chunks_.front());
    chunks_.pop_front();
    room_.notify_one();
    return chunk;
  }
  void cancel() {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    room_.notify_all();
    work_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable room_, work_, ready_;
  std::deque<std::unique_ptr<Chunk>> chunks_;
  std::vector<ChunkText> spare_texts_;  // at most window_
  std::size_t window_;
  bool finished_ = false;
  bool cancelled_ = false;
  std::string error_;
};

// Reads the input into chunks of whole lines. Returns the I/O error line, or empty.
// `total` counts the (decompressed) bytes read.
std::string read_chunks(GzInput& input, const std::string& path, ChunkWindow& window, std::uint64_t& total) {
  std::string pending;  // a line not yet complete
  std::string error;
  ChunkText text;  // NOTE: kept by a read that ends no line; a pushed chunk takes it
  while (true) {
    // The input is read straight into the chunk's text, after the line the last read left open.
    text.reserve_fresh(pending.size() + kReadBlock);
    std::memcpy(text.data.get(), pending.data(), pending.size());
    const long n = input.read(text.data.get() + pending.size(), static_cast<unsigned>(kReadBlock), error);
    if (n < 0) return fmt::format("{}: read error: {}", path, error);
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
    const std::string_view block(text.data.get() + pending.size(), static_cast<std::size_t>(n));
    const auto last_newline = block.rfind('\n');
    if (last_newline == std::string_view::npos) {
      pending.append(block);
      continue;
    }
    text.size = pending.size() + last_newline + 1;
    pending.assign(block.substr(last_newline + 1));
    auto chunk = std::make_unique<Chunk>();
    chunk->text = std::move(text);
    chunk->file_bytes = input.offset();
    if (!window.push(std::move(chunk))) return {};
    text = window.spare_text();  // a buffer a decoded chunk gave back, or none yet
  }
  if (!pending.empty()) {  // the last line, without a newline
    auto chunk = std::make_unique<Chunk>();
    chunk->text.reserve_fresh(pending.size());
    std::memcpy(chunk->text.data.get(), pending.data(), pending.size());
    chunk->text.size = pending.size();
    chunk->file_bytes = input.offset();
    window.push(std::move(chunk));
  }
  return {};
}

}  // namespace

EventLogReadResult read_event_log_parallel(GzInput& input, const std::string& path, std::size_t threads,
                                           BadLinePolicy policy, const EventLogCallback& on_event,
                                           const EventLogReadOptions& options) {
  EventLogReadResult result;
  result.decode_threads = threads;
  auto& stats = result.stats;
  ChunkWindow window(4 * threads + 2);
  std::vector<std::thread> decoders;
  decoders.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    decoders.push_back(named_thread("kvidx-decode", [&] {
      while (Chunk* chunk = window.claim()) {
        decode_chunk(*chunk, options.limits);
        window.decoded(chunk);
      }
    }));
  }

  std::string io_error;
  auto stop_requested = [&] { return options.stop != nullptr && options.stop->load(std::memory_order_relaxed); };
  // NOTE: the calling thread reads and a thread of its own hands the events on (in input order,
  // one thread, so the callback needs no locking): a Ctrl-C is delivered to the main thread and
  // fails its blocking read (EINTR), which ends the read as in the sequential reader; a reader on
  // another thread would wait in read() for more input.
  std::thread deliverer = named_thread("kvidx-hand-on", [&] {
    std::uint64_t lines_before = 0;  // lines of the chunks already handed on
    bool done = false;
    while (!done) {
      std::unique_ptr<Chunk> chunk = window.next(io_error);
      if (!chunk) break;
      std::size_t next_bad = 0;
      for (std::size_t i = 0; i <= chunk->events.size() && !done; ++i) {
        // NOTE: the bad lines that come before event i, in input order, then event i itself.
        for (; next_bad < chunk->bad.size() && chunk->bad[next_bad].events_before == i; ++next_bad) {
          if (stop_requested()) {
            result.stopped = true;
            done = true;
            break;
          }
          const auto& bad = chunk->bad[next_bad];
          const std::uint64_t line_number = lines_before + bad.line;
          ++stats.lines;
          ++stats.bad_lines;
          if (stats.first_bad_lines.size() < EventLogReadStats::kMaxReportedBadLines) {
            stats.first_bad_lines.push_back({line_number, bad.reason});
          }
          if (policy == BadLinePolicy::stop) {
            result.error = fmt::format("{}:{}: {}", path, line_number, bad.reason);
            done = true;
            break;
          }
        }
        if (done || i == chunk->events.size()) break;
        if (stop_requested()) {
          result.stopped = true;
          done = true;
          break;
        }
        ++stats.lines;
        ++stats.events;
        on_event(std::move(chunk->events[i]));
      }
      if (!done) {
        lines_before += chunk->line_count;
        if (options.position != nullptr) options.position->file_bytes = chunk->file_bytes;
      }
    }
    window.cancel();  // the reader and the decoders stop too
  });
  std::uint64_t bytes_read = 0;
  window.finish(read_chunks(input, path, window, bytes_read));
  deliverer.join();
  for (auto& t : decoders) t.join();
  stats.bytes = bytes_read;
  // NOTE: as the sequential reader: a stop may also have failed a blocking read (EINTR).
  if (stop_requested()) result.stopped = true;
  if (!io_error.empty() && !result.stopped && result.error.empty()) result.error = std::move(io_error);
  return result;
}

}  // namespace kvidx
