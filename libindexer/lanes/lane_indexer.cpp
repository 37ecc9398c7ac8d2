#include "libindexer/lanes/lane_indexer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
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

LaneIndexer::LaneIndexer(std::size_t num_lanes) : LaneIndexer(LaneIndexerOptions{.num_lanes = num_lanes}) {}

LaneIndexer::LaneIndexer(LaneIndexerOptions options) : options_(std::move(options)) {
  std::size_t num_lanes = std::max<std::size_t>(options_.num_lanes, 1);
  if (options_.prune) pruner_ = std::make_unique<RoutingDecisionPruner>(*options_.prune, options_.clock);
  lanes_.reserve(num_lanes);
  all_lanes_.resize(num_lanes);
  std::iota(all_lanes_.begin(), all_lanes_.end(), LaneId{0});
  for (LaneId id = 0; id < num_lanes; ++id) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->id = id;
  }
  // NOTE: spdlog's registry is a function-local static inside the (uninstrumented) shared library;
  // touching it here, before any lane exists, means no two lanes race to construct it on their
  // first log line (ThreadSanitizer cannot see the library's own guard).
  spdlog::default_logger_raw();
  // NOTE: threads start only after every Lane exists, so no thread sees a half-built vector.
  for (auto& lane : lanes_) lane->thread = std::thread([this, raw = lane.get()] { run_lane(*raw); });
  if (pruner_) prune_pump_ = std::thread([this] { run_prune_pump(); });
}

LaneIndexer::~LaneIndexer() { shutdown(); }

void LaneIndexer::shutdown() {
  std::lock_guard guard(shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  if (prune_pump_.joinable()) {
    {
      std::lock_guard lock(pump_mutex_);
      pump_stop_ = true;
    }
    pump_wake_.notify_one();
    // NOTE: the pump goes first: it pushes onto lanes, which refuse tasks once stopped.
    prune_pump_.join();
  }
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

bool LaneIndexer::push_all(Lane& lane, std::vector<LaneTask>& tasks) {
  {
    std::lock_guard lock(lane.mutex);
    if (lane.stopping) {
      tasks.clear();
      return false;
    }
    lane.queue.insert(lane.queue.end(), std::make_move_iterator(tasks.begin()), std::make_move_iterator(tasks.end()));
  }
  tasks.clear();
  lane.wake.notify_one();
  return true;
}

IndexerStatus LaneIndexer::enqueue_events(std::span<RouterEvent> events) {
  if (pruner_) {
    // Approximate mode orders engine removals against routing decisions one event at a time.
    for (RouterEvent& event : events) {
      if (const IndexerStatus status = enqueue_event(std::move(event)); status != IndexerStatus::ok) return status;
    }
    return IndexerStatus::ok;
  }
  if (offline()) return IndexerStatus::offline;
  // NOTE: each lane's share keeps the input order, and a stream only ever maps to one lane, so
  // per-stream order is the same as queueing the events one by one.
  thread_local std::vector<std::vector<LaneTask>> per_lane;
  per_lane.resize(lanes_.size());
  for (RouterEvent& event : events) {
    const LaneId lane = lane_for(event.stream());
    per_lane[lane].push_back(LaneTask{TaskKind::event, std::move(event), {}, nullptr});
  }
  IndexerStatus status = IndexerStatus::ok;
  for (LaneId lane = 0; lane < per_lane.size(); ++lane) {
    if (per_lane[lane].empty()) continue;
    if (!push_all(*lanes_[lane], per_lane[lane])) {
      status = IndexerStatus::offline;
      continue;
    }
    maybe_schedule_cleanup(lane);
  }
  return status;
}

IndexerStatus LaneIndexer::enqueue_event(RouterEvent event) {
  if (offline()) return IndexerStatus::offline;
  const LaneId lane = lane_for(event.stream());
  std::unique_lock<std::shared_mutex> order;
  if (pruner_ && kind_of(event.event.data) != EventKind::stored) {
    // NOTE: forget and queue as one step, so no decision lands between them (see the header).
    order = exclusive_decision_order();
    forget_engine_removal(event);
  }
  if (!push(*lanes_[lane], LaneTask{TaskKind::event, std::move(event), {}, nullptr})) return IndexerStatus::offline;
  if (order.owns_lock()) order.unlock();
  maybe_schedule_cleanup(lane);
  return IndexerStatus::ok;
}

std::unique_lock<std::shared_mutex> LaneIndexer::exclusive_decision_order() {
  if (!pruner_) return {};
  return std::unique_lock(decision_order_mutex_);
}

void LaneIndexer::forget_engine_removal(const RouterEvent& event) {
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    pruner_->forget_blocks(event.stream(), removed->block_hashes);
  } else if (std::holds_alternative<KvCacheClearData>(event.event.data)) {
    pruner_->remove_stream(event.stream());
  }
}

void LaneIndexer::maybe_schedule_cleanup(LaneId lane) {
  if (!tree_.try_schedule_cleanup()) return;
  if (!push(*lanes_[lane], LaneTask{TaskKind::cleanup, {}, {}, nullptr})) tree_.cancel_scheduled_cleanup();
}

std::shared_ptr<LaneIndexer::Completion> LaneIndexer::start_barrier(std::span<const LaneId> lanes, LaneTask task) {
  auto completion = std::make_shared<Completion>(lanes.size());
  task.completion = completion;
  for (const LaneId lane : lanes) {
    // Lanes that refuse the task (shut down) will never arrive: account for them here.
    if (!push(*lanes_[lane], task)) completion->arrive(false);
  }
  return completion;
}

IndexerStatus LaneIndexer::finish_barrier(Completion& completion) {
  const bool healthy = completion.wait();
  return healthy && !offline() ? IndexerStatus::ok : IndexerStatus::offline;
}

IndexerStatus LaneIndexer::barrier_on(std::span<const LaneId> lanes, TaskKind kind, WorkerWithDpRank stream) {
  return finish_barrier(*start_barrier(lanes, LaneTask{kind, {}, stream, nullptr}));
}

IndexerStatus LaneIndexer::flush() {
  // NOTE: the Removed events are queued before the barrier, so the barrier covers them.
  if (pruner_) collect_expired_into_lanes();
  return barrier_on(all_lanes_, TaskKind::barrier, {});
}

IndexerStatus LaneIndexer::flush_stream(WorkerWithDpRank stream) {
  const LaneId lane = lane_for(stream);
  return barrier_on(std::span<const LaneId>(&lane, 1), TaskKind::barrier, stream);
}

IndexerStatus LaneIndexer::remove_worker(WorkerId worker_id) {
  // NOTE: no lane is reserved: each lane drops the ranks it already owns. The caller is expected
  // to have stopped the worker's event source; events admitted before this barrier may be removed.
  // NOTE: in approximate mode the decision order lock is held until the sweep is done: a decision
  // for this worker recorded meanwhile would otherwise queue a Stored that the sweep could erase
  // behind the pruner's back. Lanes and the pump never take this lock, so waiting here is safe.
  auto order = exclusive_decision_order();
  if (pruner_) pruner_->remove_worker(worker_id);
  const IndexerStatus status = finish_barrier(
      *start_barrier(all_lanes_, LaneTask{TaskKind::remove_worker, {}, WorkerWithDpRank{worker_id, 0}, nullptr}));
  // Catches anything a lane's lookups did not lead to (never expected; cheap when nothing is held).
  tree_.remove_worker_sweep(worker_id);
  return status;
}

IndexerStatus LaneIndexer::remove_worker_dp_rank(WorkerId worker_id, DpRank dp_rank) {
  const WorkerWithDpRank stream{worker_id, dp_rank};
  // NOTE: reserves the lane even for a never-seen stream, so a later restore queues behind it.
  const LaneId lane = lane_for(stream);
  {
    auto order = exclusive_decision_order();
    if (pruner_) pruner_->remove_stream(stream);
    if (!push(*lanes_[lane], LaneTask{TaskKind::remove_stream, {}, stream, nullptr})) return IndexerStatus::offline;
  }
  maybe_schedule_cleanup(lane);
  return offline() ? IndexerStatus::offline : IndexerStatus::ok;
}

IndexerStatus LaneIndexer::reset_worker_dp_rank_and_wait(WorkerId worker_id, DpRank dp_rank) {
  const WorkerWithDpRank stream{worker_id, dp_rank};
  const LaneId lane = lane_for(stream);
  std::shared_ptr<Completion> completion;
  {
    auto order = exclusive_decision_order();
    if (pruner_) pruner_->remove_stream(stream);
    completion = start_barrier(std::span<const LaneId>(&lane, 1), LaneTask{TaskKind::remove_stream, {}, stream, nullptr});
  }
  return finish_barrier(*completion);
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
  sizes.blocks_pending_cleanup = tree_.dead_block_estimate();
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
    case TaskKind::event: apply_counted(lane, task.event); return;
    case TaskKind::synthetic_event: {
      if (apply_counted(lane, task.event).ok()) return;
      synthetic_not_applied_.fetch_add(1, std::memory_order_relaxed);
      // The tree did not take a synthetic Stored: let the pruner forget its blocks rather than
      // expire blocks that are not there. (A rejected Removed needs nothing: they are gone.)
      // NOTE: safe to call into the pruner here: this thread holds no lock the sink takes.
      if (const auto* store = std::get_if<KvCacheStoreData>(&task.event.event.data)) {
        std::vector<ExternalSequenceBlockHash> hashes;
        hashes.reserve(store->blocks.size());
        for (const auto& block : store->blocks) hashes.push_back(block.block_hash);
        pruner_->forget_blocks(task.event.stream(), hashes);
      }
      return;
    }
    case TaskKind::observed_event: {
      apply_counted(lane, task.event);
      if (lane.observation) {
        lane.observation->buffers[lane.id].record(
            ObservedRecord{task.correlation_id, task.accepted_ns, lane.observation->elapsed_ns()});
      }
      return;
    }
    case TaskKind::observe_install: lane.observation = std::move(task.observation); return;
    case TaskKind::observe_seal:
      if (lane.observation) lane.observation->sealed_ns[lane.id] = lane.observation->elapsed_ns();
      return;
    case TaskKind::observe_drop: lane.observation.reset(); return;
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

ApplyResult LaneIndexer::apply_counted(Lane& lane, const RouterEvent& event) {
  ApplyResult result = tree_.apply_event(lane.lookup, event);
  applied_[static_cast<std::size_t>(kind_of(event.event.data))][static_cast<std::size_t>(result.status)].fetch_add(
      1, std::memory_order_relaxed);
  if (!result.ok()) {
    spdlog::debug("lane {}: event {} not applied: {} {}", lane.id, event.event.event_id, to_string(result.status),
                  result.error);
  }
  return result;
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
  out.approximate.enabled = pruner_ != nullptr;
  out.approximate.decisions_recorded = decisions_recorded_.load(std::memory_order_relaxed);
  out.approximate.decisions_rejected = decisions_rejected_.load(std::memory_order_relaxed);
  out.approximate.synthetic_stored = synthetic_stored_.load(std::memory_order_relaxed);
  out.approximate.synthetic_removed = synthetic_removed_.load(std::memory_order_relaxed);
  out.approximate.synthetic_not_applied = synthetic_not_applied_.load(std::memory_order_relaxed);
  out.approximate.blocks_pruned = blocks_pruned_.load(std::memory_order_relaxed);
  out.approximate.tracked_blocks = pruner_ ? pruner_->tracked_blocks() : 0;
  out.lane_queue_depths.reserve(lanes_.size());
  for (const auto& lane : lanes_) {
    std::lock_guard lock(lane->mutex);
    out.lane_queue_depths.push_back(lane->queue.size());
  }
  return out;
}

}  // namespace kvidx

// ---------------------------------------------------------------------------------------------
// Approximate mode

namespace kvidx {

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

// ---------------------------------------------------------------------------------------------
// Bench observation

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

ObservationOutcome<ObservationSession> LaneIndexer::begin_observation(ObservationPlan plan) {
  if (plan.expected_events_by_stream.empty()) return ObservationError::empty_plan;
  if (offline()) return ObservationError::offline;
  bool idle = false;
  if (!observation_active_.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
    return ObservationError::already_active;
  }
  auto run = std::make_shared<ObservationRun>();
  // From here on the lease owns the claim: every early return below releases it.
  ObservationLease lease(*this, run);

  std::vector<WorkerWithDpRank> streams;
  streams.reserve(plan.expected_events_by_stream.size());
  for (const auto& [stream, expected] : plan.expected_events_by_stream) streams.push_back(stream);
  std::sort(streams.begin(), streams.end());
  if (std::adjacent_find(streams.begin(), streams.end()) != streams.end()) return ObservationError::duplicate_stream;

  std::vector<std::size_t> capacity(lanes_.size(), 0);
  for (const auto& [stream, expected] : plan.expected_events_by_stream) {
    std::size_t& lane_capacity = capacity[lane_for(stream)];
    if (expected > std::numeric_limits<std::size_t>::max() - lane_capacity) return ObservationError::capacity_overflow;
    lane_capacity += expected;
  }

  run->epoch = plan.epoch;
  run->buffers.reserve(lanes_.size());
  // NOTE: every buffer is allocated here, on the caller's thread; lanes only append in place.
  for (LaneId lane = 0; lane < lanes_.size(); ++lane) run->buffers.emplace_back(lane, capacity[lane]);
  run->sealed_ns.assign(lanes_.size(), 0);
  run->queue_depth_at_stop.assign(lanes_.size(), 0);
  if (!observation_barrier(TaskKind::observe_install, run)) return ObservationError::offline;
  return ObservationSession(std::move(lease));
}

bool LaneIndexer::observation_barrier(TaskKind kind, const std::shared_ptr<ObservationRun>& run) {
  LaneTask task{kind, {}, {}, nullptr};
  if (kind == TaskKind::observe_install) task.observation = run;
  return finish_barrier(*start_barrier(all_lanes_, std::move(task))) == IndexerStatus::ok;
}

ObservationOutcome<ObservedReceipt> LaneIndexer::enqueue_observed(const ObservationRun& run, RouterEvent event,
                                                                  std::uint32_t correlation_id) {
  if (!observation_active_.load(std::memory_order_acquire)) return ObservationError::producers_closed;
  const auto lane = assigned_lane(event.stream());
  if (!lane) return ObservationError::unknown_stream;
  LaneTask task{TaskKind::observed_event, std::move(event), {}, nullptr};
  task.correlation_id = correlation_id;
  // NOTE: stamped before the push: once queued, the lane may apply the event at once.
  task.accepted_ns = run.elapsed_ns();
  const std::uint64_t accepted_ns = task.accepted_ns;
  if (!push(*lanes_[*lane], std::move(task))) return ObservationError::offline;
  maybe_schedule_cleanup(*lane);
  return ObservedReceipt{*lane, accepted_ns};
}

void LaneIndexer::end_observation(bool harvested) {
  if (!harvested) {
    // Lanes still hold the run: have them drop it behind whatever is queued, without waiting.
    for (auto& lane : lanes_) push(*lane, LaneTask{TaskKind::observe_drop, {}, {}, nullptr});
  }
  observation_active_.store(false, std::memory_order_release);
}

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
  std::exchange(indexer_, nullptr)->end_observation(harvested);
}

ObservationOutcome<ObservedReceipt> ObservationSession::enqueue_observed(RouterEvent event,
                                                                        std::uint32_t correlation_id) const {
  return lease_.indexer_->enqueue_observed(*lease_.run_, std::move(event), correlation_id);
}

ObservationDrain ObservationSession::close_observed_producers() && {
  LaneIndexer& indexer = *lease_.indexer_;
  for (LaneId lane = 0; lane < indexer.lanes_.size(); ++lane) {
    std::lock_guard lock(indexer.lanes_[lane]->mutex);
    lease_.run_->queue_depth_at_stop[lane] = indexer.lanes_[lane]->queue.size();
  }
  return ObservationDrain(std::move(lease_));
}

ObservationOutcome<SealedObservation> ObservationDrain::seal() && {
  if (!lease_.indexer_->observation_barrier(LaneIndexer::TaskKind::observe_seal, lease_.run_)) {
    return ObservationError::offline;
  }
  // NOTE: each lane wrote its sealed_ns before arriving at the barrier we just waited on.
  std::vector<ObservationSeal> seals;
  for (LaneId lane = 0; lane < lease_.run_->sealed_ns.size(); ++lane) {
    seals.push_back(ObservationSeal{lane, lease_.run_->sealed_ns[lane]});
  }
  return SealedObservation(std::move(lease_), std::move(seals));
}

std::uint64_t SealedObservation::latest_seal_ns() const {
  std::uint64_t latest = 0;
  for (const auto& seal : seals_) latest = std::max(latest, seal.sealed_ns);
  return latest;
}

ObservationOutcome<ObservationSnapshot> SealedObservation::harvest() && {
  if (!lease_.indexer_->observation_barrier(LaneIndexer::TaskKind::observe_drop, lease_.run_)) {
    return ObservationError::offline;
  }
  // Every lane has dropped the run: the buffers are ours alone now.
  ObservationSnapshot snapshot;
  snapshot.seals = std::move(seals_);
  snapshot.buffers = std::move(lease_.run_->buffers);
  snapshot.queue_depth_at_stop = std::move(lease_.run_->queue_depth_at_stop);
  lease_.end(true);
  return snapshot;
}

}  // namespace kvidx
