// EventIntake: the one place where kvidx's event-ordering rules turn a (worker, rank)'s stream of
// RouterEvents into what the lanes apply. The live service (every NATS message and in-process
// batch), offline replay (`kvidx replay`, `dump --events`, `stats --events`) and the bridge's
// in-process sink all go through it, so a captured log rebuilds offline exactly the index the
// service built live from the same messages.
//
// Rules (StreamSequencer, stream_sequencer.h): a duplicate event_id (e.g. a redelivery) is
// skipped; a gap is counted and the event applied (with clear_on_gap the stream is cleared
// first); a publisher restart (event_id back to 0) clears the stream, then applies the event.
// A clear is a KvCacheClear of that (worker, rank) placed just before the event in the output, so
// it reaches the stream's lane in order.
//
// Not thread-safe: the caller serialises admit() calls (the service under its dispatch lock).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "libindexer/intake/stream_sequencer.h"
#include "libindexer/protocol.h"

namespace kvidx {

struct IntakeOptions {
  StreamSequencerOptions sequencing;
  // Log the first gap of each stream (warn) and every restart (info). Off where a summary reports
  // the counts instead (offline replay of a log with many streams).
  bool log_streams = true;
};

// What admit() did, by the kind of each incoming event (indexed by EventKind). The clears the
// intake inserts are not counted as accepted events: they are part of the event that caused them.
struct IntakeTally {
  std::array<std::uint64_t, 3> accepted_by_kind{};
  std::array<std::uint64_t, 3> duplicates_by_kind{};
  std::uint64_t gaps = 0;             // gap occurrences
  std::uint64_t missing_events = 0;   // sum of gap sizes
  std::uint64_t resets = 0;           // publisher restarts
  std::uint64_t clears_inserted = 0;  // restarts + gaps under clear_on_gap

  std::uint64_t accepted() const { return accepted_by_kind[0] + accepted_by_kind[1] + accepted_by_kind[2]; }
  std::uint64_t duplicates() const { return duplicates_by_kind[0] + duplicates_by_kind[1] + duplicates_by_kind[2]; }
  IntakeTally& operator+=(const IntakeTally& other);
};

class EventIntake {
 public:
  explicit EventIntake(IntakeOptions options = {});

  // Applies the ordering rules to `events` in order, moving those to apply (each preceded by a
  // clear of its stream when the rules say so) to the end of `out`. Returns what it did; the
  // same is added to totals().
  IntakeTally admit(std::span<RouterEvent> events, std::vector<RouterEvent>& out);

  // The per-stream watermarks: stream limit, snapshot save/restore, forgetting removed workers.
  StreamSequencer& sequencer() { return sequencer_; }
  const StreamSequencer& sequencer() const { return sequencer_; }
  const IntakeTally& totals() const { return totals_; }

 private:
  IntakeOptions options_;
  StreamSequencer sequencer_;
  IntakeTally totals_;
};

}  // namespace kvidx
