#include "replay/offline_replay.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

namespace kvidx {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

ReplaySummary replay_event_log(LaneIndexer& indexer, const ReplayOptions& options) {
  ReplaySummary summary;
  const auto start = Clock::now();
  auto last_progress = start;
  std::uint64_t enqueued = 0;
  bool offline = false;
  auto read = read_event_log(
      options.events_path, options.bad_lines,
      [&](EventLogLine&& line) {
        ++summary.events_by_kind[static_cast<std::size_t>(kind_of(line.event.event.data))];
        if (indexer.enqueue_event(std::move(line.event)) != IndexerStatus::ok) offline = true;
        ++enqueued;
        // NOTE: checking the clock every 4096 events keeps the progress line off the hot path.
        if (options.progress && (enqueued & 4095) == 0 && Clock::now() - last_progress > std::chrono::milliseconds(250)) {
          last_progress = Clock::now();
          const double elapsed = seconds_since(start);
          if (elapsed > 2.0) {
            std::fprintf(stderr, "\r[replay] %llu events, %.0f events/s   ", static_cast<unsigned long long>(enqueued),
                         static_cast<double>(enqueued) / elapsed);
          }
        }
      },
      options.limits);
  if (indexer.flush() != IndexerStatus::ok) offline = true;
  summary.seconds = seconds_since(start);
  if (options.progress && summary.seconds > 2.0) std::fprintf(stderr, "\r%60s\r", "");
  summary.read = std::move(read.stats);
  summary.applied = indexer.metrics();
  summary.error = std::move(read.error);
  if (summary.error.empty() && offline) summary.error = "the indexer went offline while applying (see the log above)";
  return summary;
}

std::string format_replay_summary(const ReplaySummary& summary) {
  std::string out = fmt::format("replay: {} events in {:.2f} s ({:.0f} events/s), {} bad lines\n", summary.read.events,
                                summary.seconds, summary.events_per_second(), summary.read.bad_lines);
  for (std::size_t kind = 0; kind < summary.events_by_kind.size(); ++kind) {
    const auto& results = summary.applied.applied[kind];
    out += fmt::format("  {:8} {:>10}  ok {} · parent not found {} · block not found {} · invalid {}\n",
                       to_string(static_cast<EventKind>(kind)), summary.events_by_kind[kind],
                       results[static_cast<std::size_t>(ApplyStatus::ok)],
                       results[static_cast<std::size_t>(ApplyStatus::parent_not_found)],
                       results[static_cast<std::size_t>(ApplyStatus::block_not_found)],
                       results[static_cast<std::size_t>(ApplyStatus::invalid)]);
  }
  for (const auto& bad : summary.read.first_bad_lines) {
    out += fmt::format("  bad line {}: {}\n", bad.line_number, bad.reason);
  }
  if (summary.read.bad_lines > summary.read.first_bad_lines.size()) {
    out += fmt::format("  ... and {} more bad lines\n", summary.read.bad_lines - summary.read.first_bad_lines.size());
  }
  return out;
}

}  // namespace kvidx
