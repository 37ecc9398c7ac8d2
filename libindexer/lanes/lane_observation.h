// Bench observation of the lanes: times each event from the moment a producer hands it over
// (accepted) to the moment its lane has applied it (applied), without allocating on the lanes.
// Flow: begin_observation(indexer, plan) -> ObservationSession (enqueue_observed, from any number
// of producer threads) -> close_observed_producers() -> ObservationDrain -> seal() ->
// SealedObservation -> harvest() -> ObservationSnapshot. The reference's "bench observation"
// (seed 002) is ported as a test; no kvidx bench uses it yet.
//
// Rules
// - At most one observation per indexer at a time: the ObservationLease holds the claim and is the
//   observation's only way into the lanes. Dropping any stage without a harvest ends it and makes
//   every lane drop its buffer (FIFO, without waiting).
// - Observed events are their own lane task kind: the plain enqueue path pays nothing for them.
// - Times are nanoseconds since the plan's epoch (steady clock). Each lane writes only its own
//   buffer, and only between the install and harvest barriers of one observation; the producer
//   reads buffers only after harvest, so no buffer is ever shared while it is written.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/protocol.h"
#include "libindexer/result.h"

namespace kvidx {

// How many events each stream will send, so every lane gets one buffer sized for its streams.
struct ObservationPlan {
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
  std::vector<std::pair<WorkerWithDpRank, std::size_t>> expected_events_by_stream;
};

enum class ObservationError : std::uint8_t {
  empty_plan,         // the plan names no stream
  already_active,     // another observation holds the indexer
  duplicate_stream,   // a stream appears twice in the plan
  capacity_overflow,  // a lane's expected event count does not fit in size_t
  producers_closed,   // enqueue after the observation ended
  unknown_stream,     // the event's stream was not in the plan
  offline,            // a lane failed or the indexer shut down
};

std::string_view to_string(ObservationError error);

struct ObservedReceipt {
  LaneId lane = 0;
  std::uint64_t accepted_ns = 0;  // taken before the event was queued, so applied_ns >= accepted_ns
};

struct ObservedRecord {
  std::uint32_t correlation_id = 0;
  std::uint64_t accepted_ns = 0;
  std::uint64_t applied_ns = 0;

  friend bool operator==(const ObservedRecord&, const ObservedRecord&) = default;
};

// Fixed-capacity record buffer of one lane. Records past the capacity are counted, not stored.
class LaneObservationBuffer {
 public:
  LaneObservationBuffer() = default;
  LaneObservationBuffer(LaneId lane, std::size_t capacity) : lane_(lane), capacity_(capacity) {
    records_.reserve(capacity);
  }

  // Lane-thread side; never allocates.
  void record(const ObservedRecord& record) noexcept {
    if (records_.size() < capacity_) {
      records_.push_back(record);
    } else {
      ++dropped_;
    }
  }

  LaneId lane() const { return lane_; }
  std::span<const ObservedRecord> records() const { return records_; }
  std::size_t capacity() const { return capacity_; }
  bool overflowed() const { return dropped_ > 0; }
  std::uint64_t dropped() const { return dropped_; }

 private:
  LaneId lane_ = 0;
  std::size_t capacity_ = 0;
  std::vector<ObservedRecord> records_;
  std::uint64_t dropped_ = 0;
};

struct ObservationSeal {
  LaneId lane = 0;
  std::uint64_t sealed_ns = 0;  // when the lane reached the seal barrier
};

struct ObservationSnapshot {
  std::vector<ObservationSeal> seals;            // one per lane, by lane id
  std::vector<LaneObservationBuffer> buffers;    // one per lane, by lane id
  std::vector<std::size_t> queue_depth_at_stop;  // tasks waiting per lane when producers closed

  std::uint64_t latest_seal_ns() const;
};

// State one observation shares between its session and the lane threads (see the file comment
// for who writes what when). The lane that installed it calls record and seal.
struct ObservationRun {
  std::chrono::steady_clock::time_point epoch;
  std::vector<LaneObservationBuffer> buffers;    // [lane]
  std::vector<std::uint64_t> sealed_ns;          // [lane], written by the lane at the seal barrier
  std::vector<std::size_t> queue_depth_at_stop;  // written by the producer when it closes

  std::uint64_t elapsed_ns() const {
    const auto elapsed = std::chrono::steady_clock::now() - epoch;
    return elapsed.count() < 0
               ? 0
               : static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  }
  // Lane-thread side, right after the lane applied the observed event.
  void record(LaneId lane, std::uint32_t correlation_id, std::uint64_t accepted_ns) {
    buffers[lane].record(ObservedRecord{correlation_id, accepted_ns, elapsed_ns()});
  }
  // Lane-thread side, at the seal barrier.
  void seal(LaneId lane) { sealed_ns[lane] = elapsed_ns(); }
};

// A value or the ObservationError that prevented it (libindexer/result.h).
template <class T>
using ObservationOutcome = Result<T, ObservationError>;

class ObservationSession;
class ObservationDrain;
class SealedObservation;

// Assigns every planned stream its lane, installs one buffer per lane sized for the streams it
// got, and returns when every lane has it. The session must not outlive the indexer.
ObservationOutcome<ObservationSession> begin_observation(LaneIndexer& indexer, const ObservationPlan& plan);

// The claim one observation holds on its indexer, passed from stage to stage, and the only way an
// observation reaches the lanes (LaneIndexer's one friend for it). Only begin_observation makes
// one. Releasing it without a harvest makes every lane drop its buffer (FIFO, without waiting) and
// lets a new observation begin.
class ObservationLease {
 public:
  ObservationLease(ObservationLease&& other) noexcept;
  ObservationLease& operator=(ObservationLease&& other) noexcept;
  ObservationLease(const ObservationLease&) = delete;
  ObservationLease& operator=(const ObservationLease&) = delete;
  ~ObservationLease();

  ObservationRun& run() const { return *run_; }
  // Queues `event` as an observed task on its stream's (already assigned) lane.
  ObservationOutcome<ObservedReceipt> enqueue_observed(RouterEvent event, std::uint32_t correlation_id) const;
  // Notes each lane's queue depth now (producers closing).
  void note_queue_depths() const;
  // FIFO barriers on every lane; false if the indexer went offline.
  bool seal_lanes() const;
  bool drop_from_lanes() const;
  // Ends the observation (harvested: the lanes already dropped the run).
  void end(bool harvested);

 private:
  friend ObservationOutcome<ObservationSession> begin_observation(LaneIndexer& indexer, const ObservationPlan& plan);
  // The indexer's one observation slot; nullopt while another observation holds it.
  static std::optional<ObservationLease> claim(LaneIndexer& indexer);
  ObservationLease(LaneIndexer& indexer, std::shared_ptr<ObservationRun> run)
      : indexer_(&indexer), run_(std::move(run)) {}
  LaneId assign_lane(WorkerWithDpRank stream) const;
  bool install_on_lanes() const;
  bool barrier_on_every_lane(LaneIndexer::TaskKind kind) const;

  LaneIndexer* indexer_ = nullptr;
  std::shared_ptr<ObservationRun> run_;
};

// An observation accepting events. enqueue_observed may be called from several producer threads.
class ObservationSession {
 public:
  explicit ObservationSession(ObservationLease lease) : lease_(std::move(lease)) {}  // by begin_observation

  // Queues `event` on its stream's lane (the stream must be in the plan); the lane records
  // {correlation_id, accepted_ns, applied_ns} once it has applied it.
  ObservationOutcome<ObservedReceipt> enqueue_observed(RouterEvent event, std::uint32_t correlation_id) const;
  // Ends the producing phase and notes each lane's queue depth at that moment.
  ObservationDrain close_observed_producers() &&;

 private:
  ObservationLease lease_;
};

class ObservationDrain {
 public:
  explicit ObservationDrain(ObservationLease lease) : lease_(std::move(lease)) {}  // by the session

  // FIFO barrier on every lane: each notes when it reached it, i.e. finished every observed event.
  ObservationOutcome<SealedObservation> seal() &&;

 private:
  ObservationLease lease_;
};

class SealedObservation {
 public:
  SealedObservation(ObservationLease lease, std::vector<ObservationSeal> seals)  // by the drain
      : lease_(std::move(lease)), seals_(std::move(seals)) {}

  const std::vector<ObservationSeal>& seals() const { return seals_; }
  std::uint64_t latest_seal_ns() const;
  // Takes the buffers back from the lanes and ends the observation.
  ObservationOutcome<ObservationSnapshot> harvest() &&;

 private:
  ObservationLease lease_;
  std::vector<ObservationSeal> seals_;
};

}  // namespace kvidx
