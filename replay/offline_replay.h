// Offline replay: applies an event log through the same sticky lanes as the service (so each
// (worker, rank) stream keeps its order), then flushes. The indexer it leaves behind answers
// queries, dumps and stats exactly as the live service would have after the same events.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_reader.h"

namespace kvidx {

struct ReplayOptions {
  std::string events_path;
  std::size_t lanes = 2;
  BadLinePolicy bad_lines = BadLinePolicy::skip;
  bool progress = false;  // a progress line on stderr (callers enable it only for a TTY)
  DecodeLimits limits;
};

struct ReplaySummary {
  EventLogReadStats read;
  std::array<std::uint64_t, 3> events_by_kind{};  // indexed by EventKind
  LaneIndexerMetrics applied;                     // results as counted by the lanes
  double seconds = 0;
  std::string error;  // I/O failure, or the first bad line under BadLinePolicy::stop

  bool ok() const { return error.empty(); }
  double events_per_second() const { return seconds > 0 ? static_cast<double>(read.events) / seconds : 0; }
};

// Replays `options.events_path` into `indexer` and waits until every lane applied it.
ReplaySummary replay_event_log(LaneIndexer& indexer, const ReplayOptions& options);

// Multi-line human summary for stderr.
std::string format_replay_summary(const ReplaySummary& summary);

}  // namespace kvidx
