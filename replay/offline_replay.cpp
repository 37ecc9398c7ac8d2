#include "replay/offline_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "libindexer/intake/intake_feed.h"

namespace kvidx {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// 1234 -> "1234", 143210 -> "143k", 1203400 -> "1.20M".
std::string count_text(double n) {
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e4) return fmt::format("{:.0f}k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string bytes_text(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string duration_text(double seconds) {
  const auto s = static_cast<std::uint64_t>(std::llround(std::max(seconds, 0.0)));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

std::string format_replay_progress(std::uint64_t events, double seconds, const ReadPosition& position) {
  const double rate = seconds > 0 ? static_cast<double>(events) / seconds : 0;
  std::string out = fmt::format("[replay] {} events, {} events/s, {}", count_text(static_cast<double>(events)),
                                count_text(rate), bytes_text(position.file_bytes));
  if (position.file_size == 0) return out + " read";
  const std::uint64_t done = std::min(position.file_bytes, position.file_size);
  out += fmt::format(" of {} read ({:.0f}%)", bytes_text(position.file_size),
                     100.0 * static_cast<double>(done) / static_cast<double>(position.file_size));
  if (done > 0 && seconds > 0) {
    const double bytes_per_second = static_cast<double>(done) / seconds;
    out += ", ETA " + duration_text(static_cast<double>(position.file_size - done) / bytes_per_second);
  }
  return out;
}

std::size_t default_decode_threads(std::size_t lanes, bool gzip, std::size_t cores) {
  const std::size_t busy = lanes + 2;  // the lanes, the reading thread, the applying thread
  const std::size_t spare = cores > busy ? std::min<std::size_t>(cores - busy, 8) : 0;
  return gzip ? std::max<std::size_t>(spare, 1) : spare;
}

ReplaySummary replay_event_log(LaneIndexer& indexer, const ReplayOptions& options) {
  ReplaySummary summary;
  const auto start = Clock::now();
  auto next_progress = start + options.progress_after;
  bool progress_shown = false;
  std::uint64_t enqueued = 0;
  bool offline = false;
  IntakeFeed feed(indexer, options.intake);
  // NOTE: lines are handed on in batches (one lane wake-up per batch, as the service's bursts);
  // order is kept, so the intake and the lanes see exactly the log's order.
  constexpr std::size_t kBatch = 1024;
  std::vector<RouterEvent> batch;
  batch.reserve(kBatch);
  auto hand_on = [&] {
    if (feed.deliver(batch) != IndexerStatus::ok) offline = true;
    batch.clear();
  };
  ReadPosition position;
  EventLogReadOptions read_options;
  read_options.limits = options.limits;
  read_options.stop = options.stop;
  read_options.position = &position;
  if (options.decode_threads) {
    read_options.decode_threads = *options.decode_threads;
  } else {
    read_options.choose_decode_threads = [lanes = options.lanes](bool gzip) {
      return default_decode_threads(lanes, gzip);
    };
  }
  auto read = read_event_log(
      options.events_path, options.bad_lines,
      [&](EventLogLine&& line) {
        ++summary.events_by_kind[static_cast<std::size_t>(kind_of(line.event.event.data))];
        batch.push_back(std::move(line.event));
        if (batch.size() == kBatch) hand_on();
        ++enqueued;
        // NOTE: checking the clock every 1024 events keeps the progress line off the hot path.
        if (options.progress && (enqueued & 1023) == 0 && Clock::now() >= next_progress) {
          next_progress = Clock::now() + options.progress_every;
          // "\r" + erase to the end of the line: the line is rewritten in place.
          std::fprintf(options.progress_out, "\r%s\033[K",
                       format_replay_progress(enqueued, seconds_since(start), position).c_str());
          std::fflush(options.progress_out);
          progress_shown = true;
        }
      },
      read_options);
  hand_on();
  if (indexer.flush() != IndexerStatus::ok) offline = true;
  summary.seconds = seconds_since(start);
  if (progress_shown) {
    std::fputs("\r\033[K", options.progress_out);
    std::fflush(options.progress_out);
  }
  summary.read = std::move(read.stats);
  summary.decode_threads = read.decode_threads;
  summary.intake = feed.totals();
  summary.applied = indexer.metrics();
  summary.interrupted = read.stopped;
  summary.error = std::move(read.error);
  if (summary.error.empty() && offline) summary.error = "the indexer went offline while applying (see the log above)";
  return summary;
}

std::string format_replay_summary(const ReplaySummary& summary) {
  std::string out = fmt::format("replay: {}{} events in {:.2f} s ({:.0f} events/s), {} bad lines{}\n",
                                summary.interrupted ? "INTERRUPTED after " : "", summary.read.events, summary.seconds,
                                summary.events_per_second(), summary.read.bad_lines,
                                summary.interrupted ? " (partial: the rest of the log was not read)" : "");
  for (std::size_t kind = 0; kind < summary.events_by_kind.size(); ++kind) {
    const auto& results = summary.applied.applied[kind];
    out += fmt::format("  {:8} {:>10}  ok {} · parent not found {} · block not found {} · invalid {}\n",
                       to_string(static_cast<EventKind>(kind)), summary.events_by_kind[kind],
                       results[static_cast<std::size_t>(ApplyStatus::ok)],
                       results[static_cast<std::size_t>(ApplyStatus::parent_not_found)],
                       results[static_cast<std::size_t>(ApplyStatus::block_not_found)],
                       results[static_cast<std::size_t>(ApplyStatus::invalid)]);
  }
  const IntakeTally& intake = summary.intake;
  out +=
      fmt::format("  intake   duplicates skipped {} · gaps {} ({} events missing) · restarts {}{}\n",
                  intake.duplicates(), intake.gaps, intake.missing_events, intake.resets,
                  intake.clears_inserted > 0
                      ? fmt::format(" · {} clears inserted (restarts{}, counted under cleared ok)",
                                    intake.clears_inserted, intake.clears_inserted > intake.resets ? " and gaps" : "")
                      : std::string());
  for (const auto& bad : summary.read.first_bad_lines) {
    out += fmt::format("  bad line {}: {}\n", bad.line_number, bad.reason);
  }
  if (summary.read.bad_lines > summary.read.first_bad_lines.size()) {
    out += fmt::format("  ... and {} more bad lines\n", summary.read.bad_lines - summary.read.first_bad_lines.size());
  }
  return out;
}

}  // namespace kvidx
