// Bench observation of the lanes: begin_observation and the stages it hands its lease through
// (session, drain, sealed). The lane side (recording into the installed run) is LaneIndexer's
// run_task; the rules are in lane_observation.h.
#include "libindexer/lanes/lane_observation.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

namespace kvidx {

std::string_view to_string(ObservationError error) {
  switch (error) {
    case ObservationError::empty_plan: return "empty_plan";
    case ObservationError::already_active: return "already_active";
    case ObservationError::duplicate_stream: return "duplicate_stream";
    case ObservationError::capacity_overflow: return "capacity_overflow";
    case ObservationError::producers_closed: return "producers_closed";
    case ObservationError::unknown_stream: return "unknown_stream";
    case ObservationError::offline: return "offline";
  }
  return "unknown";
}

std::uint64_t ObservationSnapshot::latest_seal_ns() const {
  std::uint64_t latest = 0;
  for (const auto& seal : seals) latest = std::max(latest, seal.sealed_ns);
  return latest;
}

ObservationOutcome<ObservationSession> begin_observation(LaneIndexer& indexer, const ObservationPlan& plan) {
  if (plan.expected_events_by_stream.empty()) return ObservationError::empty_plan;
  if (indexer.offline()) return ObservationError::offline;
  std::optional<ObservationLease> lease = ObservationLease::claim(indexer);
  if (!lease) return ObservationError::already_active;
  // From here on the lease owns the claim: every early return below releases it.
  ObservationRun& run = lease->run();

  std::vector<WorkerWithDpRank> streams;
  streams.reserve(plan.expected_events_by_stream.size());
  for (const auto& [stream, expected] : plan.expected_events_by_stream) streams.push_back(stream);
  std::sort(streams.begin(), streams.end());
  if (std::adjacent_find(streams.begin(), streams.end()) != streams.end()) return ObservationError::duplicate_stream;

  const std::size_t lanes = indexer.lane_count();
  std::vector<std::size_t> capacity(lanes, 0);
  for (const auto& [stream, expected] : plan.expected_events_by_stream) {
    std::size_t& lane_capacity = capacity[lease->assign_lane(stream)];
    if (expected > std::numeric_limits<std::size_t>::max() - lane_capacity) return ObservationError::capacity_overflow;
    lane_capacity += expected;
  }

  run.epoch = plan.epoch;
  run.buffers.reserve(lanes);
  // NOTE: every buffer is allocated here, on the caller's thread; lanes only append in place.
  for (LaneId lane = 0; lane < lanes; ++lane) run.buffers.emplace_back(lane, capacity[lane]);
  run.sealed_ns.assign(lanes, 0);
  run.queue_depth_at_stop.assign(lanes, 0);
  if (!lease->install_on_lanes()) return ObservationError::offline;
  return ObservationSession(std::move(*lease));
}

std::optional<ObservationLease> ObservationLease::claim(LaneIndexer& indexer) {
  bool idle = false;
  if (!indexer.observation_active_.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
    return std::nullopt;
  }
  return ObservationLease(indexer, std::make_shared<ObservationRun>());
}

LaneId ObservationLease::assign_lane(WorkerWithDpRank stream) const { return indexer_->lane_for(stream); }

ObservationLease::ObservationLease(ObservationLease&& other) noexcept
    : indexer_(std::exchange(other.indexer_, nullptr)), run_(std::move(other.run_)) {}

ObservationLease& ObservationLease::operator=(ObservationLease&& other) noexcept {
  if (this != &other) {
    end(false);
    indexer_ = std::exchange(other.indexer_, nullptr);
    run_ = std::move(other.run_);
  }
  return *this;
}

ObservationLease::~ObservationLease() { end(false); }

void ObservationLease::end(bool harvested) {
  if (indexer_ == nullptr) return;
  LaneIndexer& indexer = *std::exchange(indexer_, nullptr);
  if (!harvested) {
    // Lanes still hold the run: have them drop it behind whatever is queued, without waiting.
    for (auto& lane : indexer.lanes_) {
      indexer.push(*lane, LaneIndexer::LaneTask{LaneIndexer::TaskKind::observe_drop, {}, {}, nullptr});
    }
  }
  indexer.observation_active_.store(false, std::memory_order_release);
}

ObservationOutcome<ObservedReceipt> ObservationLease::enqueue_observed(RouterEvent event,
                                                                       std::uint32_t correlation_id) const {
  LaneIndexer& indexer = *indexer_;
  if (!indexer.observation_active_.load(std::memory_order_acquire)) return ObservationError::producers_closed;
  const auto lane = indexer.assigned_lane(event.stream());
  if (!lane) return ObservationError::unknown_stream;
  LaneIndexer::LaneTask task{LaneIndexer::TaskKind::observed_event, std::move(event), {}, nullptr};
  task.correlation_id = correlation_id;
  // NOTE: stamped before the push: once queued, the lane may apply the event at once.
  task.accepted_ns = run_->elapsed_ns();
  const std::uint64_t accepted_ns = task.accepted_ns;
  if (!indexer.push(*indexer.lanes_[*lane], std::move(task))) return ObservationError::offline;
  indexer.maybe_schedule_cleanup(*lane);
  return ObservedReceipt{*lane, accepted_ns};
}

void ObservationLease::note_queue_depths() const {
  LaneIndexer& indexer = *indexer_;
  for (LaneId lane = 0; lane < indexer.lanes_.size(); ++lane) {
    std::lock_guard lock(indexer.lanes_[lane]->mutex);
    run_->queue_depth_at_stop[lane] = indexer.lanes_[lane]->queue.size();
  }
}

bool ObservationLease::install_on_lanes() const {
  LaneIndexer::LaneTask task{LaneIndexer::TaskKind::observe_install, {}, {}, nullptr};
  task.observation = run_;
  return indexer_->finish_barrier(*indexer_->start_barrier(indexer_->all_lanes_, std::move(task))) == IndexerStatus::ok;
}

bool ObservationLease::seal_lanes() const { return barrier_on_every_lane(LaneIndexer::TaskKind::observe_seal); }

bool ObservationLease::drop_from_lanes() const { return barrier_on_every_lane(LaneIndexer::TaskKind::observe_drop); }

bool ObservationLease::barrier_on_every_lane(LaneIndexer::TaskKind kind) const {
  LaneIndexer::LaneTask task{kind, {}, {}, nullptr};
  return indexer_->finish_barrier(*indexer_->start_barrier(indexer_->all_lanes_, std::move(task))) == IndexerStatus::ok;
}

ObservationOutcome<ObservedReceipt> ObservationSession::enqueue_observed(RouterEvent event,
                                                                         std::uint32_t correlation_id) const {
  return lease_.enqueue_observed(std::move(event), correlation_id);
}

ObservationDrain ObservationSession::close_observed_producers() && {
  lease_.note_queue_depths();
  return ObservationDrain(std::move(lease_));
}

ObservationOutcome<SealedObservation> ObservationDrain::seal() && {
  if (!lease_.seal_lanes()) return ObservationError::offline;
  // NOTE: each lane wrote its sealed_ns before arriving at the barrier we just waited on.
  std::vector<ObservationSeal> seals;
  const ObservationRun& run = lease_.run();
  for (LaneId lane = 0; lane < run.sealed_ns.size(); ++lane) {
    seals.push_back(ObservationSeal{lane, run.sealed_ns[lane]});
  }
  return SealedObservation(std::move(lease_), std::move(seals));
}

std::uint64_t SealedObservation::latest_seal_ns() const {
  std::uint64_t latest = 0;
  for (const auto& seal : seals_) latest = std::max(latest, seal.sealed_ns);
  return latest;
}

ObservationOutcome<ObservationSnapshot> SealedObservation::harvest() && {
  if (!lease_.drop_from_lanes()) return ObservationError::offline;
  // Every lane has dropped the run: the buffers are ours alone now.
  ObservationRun& run = lease_.run();
  ObservationSnapshot snapshot;
  snapshot.seals = std::move(seals_);
  snapshot.buffers = std::move(run.buffers);
  snapshot.queue_depth_at_stop = std::move(run.queue_depth_at_stop);
  lease_.end(true);
  return snapshot;
}

}  // namespace kvidx
