// LaneIndexer, approximate mode: routing decisions recorded through the RoutingDecisionPruner,
// its synthetic Stored / Removed events queued on the streams' lanes, engine removals ordered
// against decisions, and the prune pump thread. Lock order and rules: lane_indexer.h.
#include "libindexer/lanes/lane_indexer.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace kvidx {

std::unique_lock<std::shared_mutex> LaneIndexer::exclusive_decision_order() {
  if (!pruner_) return {};
  return std::unique_lock(decision_order_mutex_);
}

void LaneIndexer::forget_engine_removal(const RouterEvent& event) {
  // The pruner tracks device blocks only: a lower tier's Removed leaves them; a Cleared of any
  // tier clears every tier (lane_indexer.h).
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    if (event.tier() != StorageTier::device) return;
    pruner_->forget_blocks(event.stream(), removed->block_hashes);
  } else if (std::holds_alternative<KvCacheClearData>(event.event.data)) {
    pruner_->remove_stream(event.stream());
  }
}

std::string_view to_string(RoutingDecisionStatus status) {
  switch (status) {
    case RoutingDecisionStatus::recorded: return "recorded";
    case RoutingDecisionStatus::not_approximate: return "not_approximate";
    case RoutingDecisionStatus::length_mismatch: return "length_mismatch";
    case RoutingDecisionStatus::offline: return "offline";
  }
  return "unknown";
}

RoutingDecisionStatus LaneIndexer::process_routing_decision(WorkerWithDpRank stream,
                                                            std::span<const LocalBlockHash> locals,
                                                            std::span<const ExternalSequenceBlockHash> sequence) {
  if (!pruner_) return RoutingDecisionStatus::not_approximate;
  if (offline()) return RoutingDecisionStatus::offline;
  bool queued = true;
  RecordedDecision recorded;
  {
    // NOTE: shared: decisions only order against removals; among themselves the pruner's lock
    // serializes them.
    std::shared_lock order(decision_order_mutex_);
    recorded = pruner_->record_decision(stream, locals, sequence,
                                        [&](RouterEvent&& event) { queued = enqueue_synthetic(std::move(event)); });
  }
  if (recorded.status == DecisionStatus::length_mismatch) {
    decisions_rejected_.fetch_add(1, std::memory_order_relaxed);
    return RoutingDecisionStatus::length_mismatch;
  }
  decisions_recorded_.fetch_add(1, std::memory_order_relaxed);
  if (recorded.over_capacity) kick_prune_pump();
  return queued && !offline() ? RoutingDecisionStatus::recorded : RoutingDecisionStatus::offline;
}

std::size_t LaneIndexer::tracked_blocks(WorkerWithDpRank stream) const {
  return pruner_ ? pruner_->tracked_blocks(stream) : 0;
}

bool LaneIndexer::enqueue_synthetic(RouterEvent event) {
  // Runs under the pruner's lock: only short, non-blocking locks below (assignment, lane queue).
  // NOTE: counted before the push: once queued, a lane may apply the event before this thread
  // runs another line, and a caller that saw its effect must also see it counted.
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    synthetic_removed_.fetch_add(1, std::memory_order_relaxed);
    blocks_pruned_.fetch_add(removed->block_hashes.size(), std::memory_order_relaxed);
  } else {
    synthetic_stored_.fetch_add(1, std::memory_order_relaxed);
  }
  const LaneId lane = lane_for(event.stream());
  if (!push(*lanes_[lane], LaneTask{TaskKind::synthetic_event, std::move(event), {}, nullptr})) return false;
  maybe_schedule_cleanup(lane);
  return true;
}

void LaneIndexer::collect_expired_into_lanes() {
  // Blocks pruned are counted per Removed event by enqueue_synthetic.
  pruner_->collect_expired([this](RouterEvent&& event) { enqueue_synthetic(std::move(event)); });
}

void LaneIndexer::kick_prune_pump() {
  {
    std::lock_guard lock(pump_mutex_);
    pump_kick_ = true;
  }
  pump_wake_.notify_one();
}

void LaneIndexer::run_prune_pump() {
  std::unique_lock lock(pump_mutex_);
  while (!pump_stop_) {
    pump_kick_ = false;
    lock.unlock();
    collect_expired_into_lanes();
    auto sleep = std::chrono::duration_cast<std::chrono::steady_clock::duration>(options_.prune_pump_max_sleep);
    if (const auto next = pruner_->next_expiry()) {
      // NOTE: the distance is measured on the injected clock but slept on the real one; the
      // max-sleep bound keeps a clock that does not follow real time from stalling the pump.
      sleep = std::clamp(*next - options_.clock(), std::chrono::steady_clock::duration::zero(), sleep);
    }
    lock.lock();
    // A decision that went over capacity kicks the pump; a kick that came while this pass was
    // collecting is kept in pump_kick_ and ends this wait at once.
    pump_wake_.wait_for(lock, sleep, [&] { return pump_stop_ || pump_kick_; });
  }
}

}  // namespace kvidx
