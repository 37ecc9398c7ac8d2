// Offline replay: applies an event log through the service's intake (the same event-ordering rules:
// duplicate event_ids skipped, gaps counted, a publisher restart clears its stream first,
// optionally clear on gap) and the same sticky lanes (so each (worker, rank) stream keeps its
// order), then flushes. The indexer it leaves behind answers queries, dumps and stats exactly as
// the live service would have after the same messages in the same order.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "libindexer/intake/event_intake.h"
#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_reader.h"

namespace kvidx {

struct ReplayOptions {
  std::string events_path;
  std::size_t lanes = 2;
  BadLinePolicy bad_lines = BadLinePolicy::skip;
  // A progress line, rewritten in place (callers enable it only when `progress_out` is a TTY):
  // first after `progress_after`, then every `progress_every`.
  bool progress = false;
  std::FILE* progress_out = stderr;
  std::chrono::milliseconds progress_after{1000};
  std::chrono::milliseconds progress_every{250};
  // Once true (e.g. set by a SIGINT handler), reading stops; what was read is still applied.
  const std::atomic<bool>* stop = nullptr;
  DecodeLimits limits;
  // Threads decoding lines while the calling thread hands events to the intake and lanes (see
  // EventLogReadOptions::decode_threads); 0 decodes on the calling thread. Not set:
  // default_decode_threads(lanes, whether the input is gzip), decided once its first bytes are read.
  std::optional<std::size_t> decode_threads = 0;
  // The service's ordering options (`--clear-on-gap`). Per-stream log lines are off by default:
  // the summary reports the counts.
  IntakeOptions intake{StreamSequencerOptions{}, false};
};

// The decode threads `kvidx replay` (dump/stats --events) uses unless told: the cores left beside
// `lanes` lanes, the reading thread and the applying thread (which reads and decodes itself when
// this is 0), at most 8; but at least 1 for a gzip log, whose inflating then runs on the reading
// thread beside the decoding. On 2 cores with 2 lanes (1M-event log): plain 2.1-2.3 s with 0
// against 2.6 s with 1 decode thread; gzip (zlib then) 4.3 s with 1 against 5.0-5.9 s with 0.
std::size_t default_decode_threads(std::size_t lanes, bool gzip,
                                   std::size_t cores = std::thread::hardware_concurrency());

struct ReplaySummary {
  EventLogReadStats read;
  std::array<std::uint64_t, 3> events_by_kind{};  // indexed by EventKind
  IntakeTally intake;                             // duplicates skipped, gaps, restarts (as the service's stats)
  LaneIndexerMetrics applied;                     // results as counted by the lanes
  double seconds = 0;
  std::size_t decode_threads = 0;  // what the read used
  bool interrupted = false;        // `stop` ended the read early: the counts cover a prefix of the log
  std::string error;               // I/O failure, or the first bad line under BadLinePolicy::stop

  bool ok() const { return error.empty(); }
  double events_per_second() const { return seconds > 0 ? static_cast<double>(read.events) / seconds : 0; }
};

// Replays `options.events_path` into `indexer` and waits until every lane applied it (or, once
// `options.stop` is set, what was read so far).
ReplaySummary replay_event_log(LaneIndexer& indexer, const ReplayOptions& options);

// Multi-line human summary for stderr; an interrupted replay says so on its first line.
std::string format_replay_summary(const ReplaySummary& summary);

// The progress line: "[replay] 1.20M events, 143k events/s, 212.4 MiB of 1.40 GiB read (15%),
// ETA 1m12s" (without size and ETA when the input's size is unknown, e.g. a pipe).
std::string format_replay_progress(std::uint64_t events, double seconds, const ReadPosition& position);

}  // namespace kvidx
