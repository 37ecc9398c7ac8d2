#include "libindexer/lane_indexer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace kvidx {

void LaneIndexer::Completion::arrive(bool lane_healthy) {
  std::lock_guard lock(mutex_);
  healthy_ = healthy_ && lane_healthy;
  if (--pending_ == 0) done_.notify_all();
}

bool LaneIndexer::Completion::wait() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  return healthy_;
}

LaneIndexer::LaneIndexer(std::size_t num_lanes) {
  if (num_lanes == 0) num_lanes = 1;
  lanes_.reserve(num_lanes);
  all_lanes_.resize(num_lanes);
  std::iota(all_lanes_.begin(), all_lanes_.end(), LaneId{0});
  for (LaneId id = 0; id < num_lanes; ++id) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->id = id;
  }
  // NOTE: threads start only after every Lane exists, so no thread sees a half-built vector.
  for (auto& lane : lanes_) lane->thread = std::thread([this, raw = lane.get()] { run_lane(*raw); });
}

LaneIndexer::~LaneIndexer() { shutdown(); }

void LaneIndexer::shutdown() {
  std::lock_guard guard(shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& lane : lanes_) push(*lane, LaneTask{TaskKind::stop, {}, {}, nullptr});
  for (auto& lane : lanes_) {
    if (lane->thread.joinable()) lane->thread.join();
  }
  offline_.store(true, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------
// Lane assignment

std::optional<LaneId> LaneIndexer::assigned_lane(WorkerWithDpRank stream) const {
  std::shared_lock lock(assignment_mutex_);
  if (auto it = assignments_.find(stream); it != assignments_.end()) return it->second;
  return std::nullopt;
}

LaneId LaneIndexer::lane_for(WorkerWithDpRank stream) {
  if (auto lane = assigned_lane(stream)) return *lane;
  std::unique_lock lock(assignment_mutex_);
  auto [it, inserted] = assignments_.try_emplace(stream, LaneId{0});
  if (inserted) it->second = next_assignment_++ % lanes_.size();
  return it->second;
}

// ---------------------------------------------------------------------------------------------
// Producers

bool LaneIndexer::push(Lane& lane, LaneTask task) {
  {
    std::lock_guard lock(lane.mutex);
    if (lane.stopping) return false;
    if (task.kind == TaskKind::stop) lane.stopping = true;
    lane.queue.push_back(std::move(task));
  }
  lane.wake.notify_one();
  return true;
}

IndexerStatus LaneIndexer::enqueue_event(RouterEvent event) {
  if (offline()) return IndexerStatus::offline;
  const LaneId lane = lane_for(event.stream());
  if (!push(*lanes_[lane], LaneTask{TaskKind::event, std::move(event), {}, nullptr})) return IndexerStatus::offline;
  maybe_schedule_cleanup(lane);
  return IndexerStatus::ok;
}

void LaneIndexer::maybe_schedule_cleanup(LaneId lane) {
  if (!tree_.try_schedule_cleanup()) return;
  if (!push(*lanes_[lane], LaneTask{TaskKind::cleanup, {}, {}, nullptr})) tree_.cancel_scheduled_cleanup();
}

IndexerStatus LaneIndexer::barrier_on(std::span<const LaneId> lanes, TaskKind kind, WorkerWithDpRank stream) {
  auto completion = std::make_shared<Completion>(lanes.size());
  std::size_t pushed = 0;
  for (const LaneId lane : lanes) {
    if (push(*lanes_[lane], LaneTask{kind, {}, stream, completion})) ++pushed;
  }
  // Lanes that refused the task (shut down) will never arrive: account for them here.
  for (std::size_t i = pushed; i < lanes.size(); ++i) completion->arrive(false);
  const bool healthy = completion->wait();
  return healthy && !offline() ? IndexerStatus::ok : IndexerStatus::offline;
}

IndexerStatus LaneIndexer::flush() { return barrier_on(all_lanes_, TaskKind::barrier, {}); }

IndexerStatus LaneIndexer::flush_stream(WorkerWithDpRank stream) {
  const LaneId lane = lane_for(stream);
  return barrier_on(std::span<const LaneId>(&lane, 1), TaskKind::barrier, stream);
}

IndexerStatus LaneIndexer::remove_worker(WorkerId worker_id) {
  // NOTE: no lane is reserved: each lane drops the ranks it already owns. The caller is expected
  // to have stopped the worker's event source; events admitted before this barrier may be removed.
  const IndexerStatus status = barrier_on(all_lanes_, TaskKind::remove_worker, WorkerWithDpRank{worker_id, 0});
  // Catches anything a lane's lookups did not lead to (never expected; cheap when nothing is held).
  tree_.remove_worker_sweep(worker_id);
  return status;
}

IndexerStatus LaneIndexer::remove_worker_dp_rank(WorkerId worker_id, DpRank dp_rank) {
  const WorkerWithDpRank stream{worker_id, dp_rank};
  // NOTE: reserves the lane even for a never-seen stream, so a later restore queues behind it.
  const LaneId lane = lane_for(stream);
  if (!push(*lanes_[lane], LaneTask{TaskKind::remove_stream, {}, stream, nullptr})) return IndexerStatus::offline;
  maybe_schedule_cleanup(lane);
  return offline() ? IndexerStatus::offline : IndexerStatus::ok;
}

IndexerStatus LaneIndexer::reset_worker_dp_rank_and_wait(WorkerId worker_id, DpRank dp_rank) {
  const WorkerWithDpRank stream{worker_id, dp_rank};
  const LaneId lane = lane_for(stream);
  return barrier_on(std::span<const LaneId>(&lane, 1), TaskKind::remove_stream, stream);
}

IndexerStatus LaneIndexer::inject_lane_failure_for_test(LaneId lane) {
  return push(*lanes_.at(lane), LaneTask{TaskKind::fail_for_test, {}, {}, nullptr}) ? IndexerStatus::ok
                                                                                   : IndexerStatus::offline;
}

// ---------------------------------------------------------------------------------------------
// Readers of aggregate state

std::optional<std::vector<RouterEvent>> LaneIndexer::dump_events() {
  if (flush() != IndexerStatus::ok) return std::nullopt;
  std::vector<RouterEvent> events = tree_.dump_events();
  std::uint64_t next_id = 0;
  for (auto& event : events) event.event.event_id = next_id++;
  return events;
}

ShardSizes LaneIndexer::shard_sizes() const {
  ShardSizes sizes;
  for (const auto& [stream, blocks] : tree_.stream_block_counts()) {
    ++sizes.worker_count;
    sizes.block_count += blocks;
  }
  sizes.node_count = tree_.node_count();
  return sizes;
}

std::vector<WorkerId> LaneIndexer::get_workers() const {
  std::vector<WorkerId> workers;
  for (const auto& [stream, blocks] : tree_.stream_block_counts()) workers.push_back(stream.worker_id);
  std::sort(workers.begin(), workers.end());
  workers.erase(std::unique(workers.begin(), workers.end()), workers.end());
  return workers;
}

// ---------------------------------------------------------------------------------------------
// Lane threads

void LaneIndexer::run_lane(Lane& lane) {
  std::vector<LaneTask> batch;
  while (true) {
    {
      std::unique_lock lock(lane.mutex);
      lane.wake.wait(lock, [&] { return !lane.queue.empty(); });
      // NOTE: swap, not copy: both vectors keep their capacity, so a busy lane stops allocating.
      batch.swap(lane.queue);
    }
    for (auto& task : batch) {
      if (task.kind == TaskKind::stop) return;  // stop is always the last task ever queued
      try {
        run_task(lane, task);
      } catch (const std::exception& error) {
        fail_lane(lane, error.what());
      } catch (...) {
        fail_lane(lane, "unknown exception");
      }
      // NOTE: barriers complete even on a failed lane, so callers never wait forever.
      if (task.completion) task.completion->arrive(!lane.failed);
    }
    batch.clear();
  }
}

void LaneIndexer::run_task(Lane& lane, LaneTask& task) {
  if (lane.failed) return;  // a failed lane only drains its queue
  switch (task.kind) {
    case TaskKind::event: {
      const ApplyResult result = tree_.apply_event(lane.lookup, task.event);
      applied_[static_cast<std::size_t>(kind_of(task.event.event.data))][static_cast<std::size_t>(result.status)]
          .fetch_add(1, std::memory_order_relaxed);
      if (!result.ok()) {
        spdlog::debug("lane {}: event {} not applied: {} {}", lane.id, task.event.event.event_id,
                      to_string(result.status), result.error);
      }
      return;
    }
    case TaskKind::barrier: return;
    case TaskKind::remove_worker: {
      std::vector<WorkerWithDpRank> owned;
      for (const auto& [stream, lookup] : lane.lookup) {
        if (stream.worker_id == task.stream.worker_id) owned.push_back(stream);
      }
      for (const auto stream : owned) tree_.remove_stream(lane.lookup, stream);
      return;
    }
    case TaskKind::remove_stream: tree_.remove_stream(lane.lookup, task.stream); return;
    case TaskKind::cleanup: tree_.run_cleanup(); return;
    case TaskKind::fail_for_test: throw std::runtime_error("injected lane failure");
    case TaskKind::stop: return;
  }
}

void LaneIndexer::fail_lane(Lane& lane, const char* what) {
  lane.failed = true;
  offline_.store(true, std::memory_order_release);
  std::call_once(failure_logged_, [&] {
    spdlog::error("indexer lane {} failed and stopped applying events; the indexer is offline: {}", lane.id, what);
  });
}

}  // namespace kvidx

namespace kvidx {

std::uint64_t LaneIndexerMetrics::applied_total() const {
  std::uint64_t total = 0;
  for (const auto& by_status : applied) {
    for (auto count : by_status) total += count;
  }
  return total;
}

std::uint64_t LaneIndexerMetrics::applied_with(ApplyStatus status) const {
  std::uint64_t total = 0;
  for (const auto& by_status : applied) total += by_status[static_cast<std::size_t>(status)];
  return total;
}

LaneIndexerMetrics LaneIndexer::metrics() const {
  LaneIndexerMetrics out;
  for (std::size_t kind = 0; kind < LaneIndexerMetrics::kKinds; ++kind) {
    for (std::size_t status = 0; status < LaneIndexerMetrics::kStatuses; ++status) {
      out.applied[kind][status] = applied_[kind][status].load(std::memory_order_relaxed);
    }
  }
  out.lane_queue_depths.reserve(lanes_.size());
  for (const auto& lane : lanes_) {
    std::lock_guard lock(lane->mutex);
    out.lane_queue_depths.push_back(lane->queue.size());
  }
  return out;
}

}  // namespace kvidx
