// Per-stream event_id watermarks: decides, for each incoming event of a (worker, rank) publisher,
// whether to apply it, skip it as a duplicate, count a gap, or treat it as a publisher restart.
// Plain state machine: no I/O, no locking (the caller serialises calls per stream; kvidx's ingest
// calls it from the single thread that dispatches events to lanes, so order is the bus order).
//
// Rules (docs/wire-format.md "Ordering, gaps and recovery"):
//  - first event of a stream: apply, whatever its id (watermark becomes that id);
//  - id == watermark + 1: apply;
//  - id <= watermark: duplicate (e.g. JetStream redelivery) -> skip, idempotently;
//    except id == 0 while watermark > 0, or id more than `reset_distance` below the watermark:
//    the publisher restarted -> reset (clear the stream, then apply; watermark = id);
//  - id > watermark + 1: gap of (id - watermark - 1) events -> counted, reported once per stream
//    (first_gap_in_stream) and applied; with `clear_on_gap` the caller also clears the stream first
//    (re-sync: drop that rank's possibly stale blocks and rebuild from fresh state).
// Stream limit (`max_streams`, 0 = none): the caller admits each message's streams with
// admit_streams() before observing its events, so a message that would bring the number of
// distinct (worker, rank) streams past the limit is refused whole; forgetting streams (a removed
// worker) frees their places.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx {

struct StreamSequencerOptions {
  // A backwards jump larger than this is a restart, not a duplicate; 0 disables (only id 0 resets).
  std::uint64_t reset_distance = 0;
  bool clear_on_gap = false;
  std::size_t max_streams = 0;  // distinct (worker, rank) streams; 0: unlimited
};

enum class SequenceVerdict : std::uint8_t { apply, duplicate, gap, reset };

struct SequenceDecision {
  SequenceVerdict verdict = SequenceVerdict::apply;
  bool clear_stream_first = false;   // reset, or gap with clear_on_gap
  std::uint64_t missing = 0;         // gap: events skipped between the watermark and this id
  bool first_gap_in_stream = false;  // gap: log it (only the first gap of each stream is logged)

  bool should_apply() const { return verdict != SequenceVerdict::duplicate; }
};

struct SequencerCounters {
  std::uint64_t applied = 0;
  std::uint64_t duplicates = 0;
  std::uint64_t gaps = 0;            // gap occurrences
  std::uint64_t missing_events = 0;  // sum of gap sizes
  std::uint64_t resets = 0;
};

class StreamSequencer {
 public:
  explicit StreamSequencer(StreamSequencerOptions options = {}) : options_(options) {}

  // Classifies `event_id` for `stream` and, unless it is a duplicate, advances the watermark.
  SequenceDecision observe(WorkerWithDpRank stream, std::uint64_t event_id);

  // The streams of `events` that are not known yet, if taking them all would exceed max_streams
  // (then nothing changes); otherwise none: they are reserved (counted from now on, their first
  // observe() still a first event). Always admits when there is no limit.
  std::optional<std::vector<WorkerWithDpRank>> refuse_new_streams(std::span<const RouterEvent> events);
  std::size_t stream_count() const { return streams_.size(); }
  std::size_t max_streams() const { return options_.max_streams; }

  std::optional<std::uint64_t> watermark(WorkerWithDpRank stream) const;
  // Sets a stream's watermark (restoring a snapshot).
  void restore(WorkerWithDpRank stream, std::uint64_t watermark);
  // Forgets streams (worker removed): their next event is a first event again.
  void forget(WorkerWithDpRank stream);
  void forget_worker(WorkerId worker);
  void clear();

  // Every stream's watermark, sorted by (worker, rank).
  std::vector<std::pair<WorkerWithDpRank, std::uint64_t>> watermarks() const;
  const SequencerCounters& counters() const { return counters_; }
  std::size_t streams_with_gaps() const;

 private:
  struct StreamState {
    std::uint64_t watermark = 0;
    bool gap_reported = false;
    bool seen = true;  // false: reserved by refuse_new_streams, no event observed yet
  };

  StreamSequencerOptions options_;
  std::unordered_map<WorkerWithDpRank, StreamState, WorkerWithDpRankHasher> streams_;
  SequencerCounters counters_;
  std::vector<WorkerWithDpRank> unknown_;  // scratch of refuse_new_streams
};

}  // namespace kvidx
