// LaneIndexer: the lanes (threads, queues, stream assignment), the producers that queue events and
// barriers on them, removal, and the readers of aggregate state. Rules: lane_indexer.h.
#include "libindexer/lanes/lane_indexer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include "libindexer/lanes/lane_observation.h"
#include "libindexer/thread_name.h"

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
  for (auto& lane : lanes_) {
    lane->thread = named_thread("kvidx-lane-" + std::to_string(lane->id), [this, raw = lane.get()] { run_lane(*raw); });
  }
  if (pruner_) {
    prune_pump_ = named_thread("kvidx-prune", [this] { run_prune_pump(); });
  }
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

// NOTE: per thread and always left empty (only its capacity stays, handed to the lane in
// exchange), so one serves every lane and indexer the thread pushes to.
std::vector<LaneIndexer::LaneTask>& LaneIndexer::spent_tasks() {
  thread_local std::vector<LaneTask> spent;
  return spent;
}

bool LaneIndexer::push(Lane& lane, LaneTask task) {
  auto& spent = spent_tasks();
  {
    std::lock_guard lock(lane.mutex);
    if (lane.stopping) return false;
    if (task.kind == TaskKind::stop) lane.stopping = true;
    lane.queue.push_back(std::move(task));
    spent.swap(lane.spent);
  }
  lane.wake.notify_one();
  spent.clear();
  return true;
}

bool LaneIndexer::push_all(Lane& lane, std::vector<LaneTask>& tasks) {
  auto& spent = spent_tasks();
  {
    std::lock_guard lock(lane.mutex);
    if (lane.stopping) {
      tasks.clear();
      return false;
    }
    lane.queue.insert(lane.queue.end(), std::make_move_iterator(tasks.begin()), std::make_move_iterator(tasks.end()));
    spent.swap(lane.spent);
  }
  tasks.clear();
  lane.wake.notify_one();
  spent.clear();
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
  // A message's events usually come from one stream: its lane is looked up once for the run.
  std::optional<std::pair<WorkerWithDpRank, LaneId>> last;
  for (RouterEvent& event : events) {
    const WorkerWithDpRank stream = event.stream();
    if (!last || last->first != stream) last.emplace(stream, lane_for(stream));
    LaneTask& task = per_lane[last->second].emplace_back();  // NOTE: built in place: one move of the event
    task.kind = TaskKind::event;
    task.event = std::move(event);
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

void LaneIndexer::maybe_schedule_cleanup(LaneId lane) {
  for_each_tree([&](StorageTier tier, ConcurrentRadixTree& tree) {
    if (!tree.try_schedule_cleanup()) return;
    LaneTask task{TaskKind::cleanup, {}, {}, nullptr};
    task.tier = tier;
    if (!push(*lanes_[lane], std::move(task))) tree.cancel_scheduled_cleanup();
  });
}

ConcurrentRadixTree& LaneIndexer::lower_tree_or_create(StorageTier tier) {
  if (ConcurrentRadixTree* tree = lower_tree(tier)) return *tree;
  std::lock_guard lock(lower_trees_mutex_);
  const std::size_t index = tier_index(tier) - 1;
  if (!lower_owned_[index]) {
    lower_owned_[index] = std::make_unique<ConcurrentRadixTree>();
    // NOTE: published only once built; readers load it with acquire.
    lower_trees_[index].store(lower_owned_[index].get(), std::memory_order_release);
  }
  return *lower_owned_[index];
}

const ConcurrentRadixTree* LaneIndexer::tier_tree(StorageTier tier) const {
  return tier == StorageTier::device ? &tree_ : lower_tree(tier);
}

TieredOverlapScores LaneIndexer::find_tiered_matches(std::span<const LocalBlockHash> query, bool early_exit) const {
  TieredOverlapScores out;
  out.device = tree_.find_matches(query, early_exit);
  for (std::size_t i = 0; i < kLowerTierCount; ++i) {
    if (const auto* tree = lower_trees_[i].load(std::memory_order_acquire)) {
      out.lower[i] = std::move(tree->find_matches(query, early_exit).scores);
    }
  }
  return out;
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
  for_each_tree([&](StorageTier, ConcurrentRadixTree& tree) { tree.remove_worker_sweep(worker_id); });
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
    completion =
        start_barrier(std::span<const LaneId>(&lane, 1), LaneTask{TaskKind::remove_stream, {}, stream, nullptr});
  }
  return finish_barrier(*completion);
}

// ---------------------------------------------------------------------------------------------
// Readers of aggregate state

std::optional<std::vector<RouterEvent>> LaneIndexer::dump_events() {
  if (flush() != IndexerStatus::ok) return std::nullopt;
  std::vector<RouterEvent> events;
  // Each tier's events carry their tier (device's none, as on the wire), so a restore rebuilds
  // every tree; a stream's tiers are independent trees, so their order in the dump does not matter.
  for_each_tree([&](StorageTier tier, const ConcurrentRadixTree& tree) {
    std::vector<RouterEvent> tier_events = tree.dump_events();
    for (auto& event : tier_events) {
      if (tier != StorageTier::device) event.storage_tier = tier;
      events.push_back(std::move(event));
    }
  });
  std::uint64_t next_id = 0;
  for (auto& event : events) event.event.event_id = next_id++;
  return events;
}

ShardSizes LaneIndexer::shard_sizes() {
  // NOTE: the status is not needed: an offline indexer still answers with what it applied.
  (void)barrier_on(all_lanes_, TaskKind::barrier, {});
  return shard_sizes_now();
}

ShardSizes LaneIndexer::shard_sizes_now() const {
  ShardSizes sizes;
  for_each_tree([&](StorageTier tier, const ConcurrentRadixTree& tree) {
    const std::size_t t = tier_index(tier);
    for (const auto& [stream, blocks] : tree.stream_block_counts()) {
      ++sizes.streams_by_tier[t];
      sizes.blocks_by_tier[t] += blocks;
    }
    sizes.nodes_by_tier[t] = tree.node_count();
  });
  sizes.worker_count = sizes.streams_by_tier[tier_index(StorageTier::device)];
  sizes.block_count = sizes.blocks_by_tier[tier_index(StorageTier::device)];
  sizes.node_count = sizes.nodes_by_tier[tier_index(StorageTier::device)];
  sizes.blocks_pending_cleanup = tree_.dead_block_estimate();
  return sizes;
}

IndexMemory LaneIndexer::memory() {
  auto completion = start_barrier(all_lanes_, LaneTask{TaskKind::measure_lookups, {}, {}, nullptr});
  // NOTE: the status is not needed: a failed lane still arrives; its lookups are then not counted.
  (void)finish_barrier(*completion);
  IndexMemory out;
  out.lookup_bytes = completion->bytes.load(std::memory_order_relaxed);
  out.lookup_entries = completion->entries.load(std::memory_order_relaxed);
  for_each_tree([&](StorageTier, const ConcurrentRadixTree& tree) { out.trees += tree.memory(); });
  return out;
}

std::vector<WorkerId> LaneIndexer::get_workers() {
  (void)barrier_on(all_lanes_, TaskKind::barrier, {});
  // A worker holding blocks in any tier (one that offloaded everything is still a worker).
  std::vector<WorkerId> workers;
  for_each_tree([&](StorageTier, const ConcurrentRadixTree& tree) {
    for (const auto& [stream, blocks] : tree.stream_block_counts()) workers.push_back(stream.worker_id);
  });
  std::sort(workers.begin(), workers.end());
  workers.erase(std::unique(workers.begin(), workers.end()), workers.end());
  return workers;
}

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
  for (std::size_t tier = 0; tier < kStorageTierCount; ++tier) {
    out.applied_by_tier[tier] = applied_by_tier_[tier].load(std::memory_order_relaxed);
    out.cleanup_nodes_removed[tier] = cleanup_nodes_removed_[tier].load(std::memory_order_relaxed);
    out.cleanup_nodes_merged[tier] = cleanup_nodes_merged_[tier].load(std::memory_order_relaxed);
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

// ---------------------------------------------------------------------------------------------
// Lane threads

namespace {

// Blocks an event task carries (its heap memory, roughly: a Stored's blocks, a Removed's hashes).
std::size_t carried_blocks(const RouterEvent& event) {
  if (const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data)) return stored->blocks.size();
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) return removed->block_hashes.size();
  return 0;
}

}  // namespace

void LaneIndexer::run_lane(Lane& lane) {
  std::vector<LaneTask> batch;
  std::size_t batch_blocks = 0;
  // The batch's barriers, with the lane's health when each was reached. Invariant: a barrier
  // arrives only once the lane has let go of the batch it came in (destroyed it, or handed a small
  // one back for the next push to destroy), so when flush() returns no lane still holds a large
  // batch of events queued before it: memory measured then (the benches' RSS rows) or events
  // acknowledged then (the service's JetStream acks) are not still held by a lane.
  std::vector<std::pair<std::shared_ptr<Completion>, bool>> arrivals;
  arrivals.reserve(8);
  bool stopping = false;
  while (true) {
    {
      std::unique_lock lock(lane.mutex);
      // The applied batch goes back to the pushing side, destroyed by the next push: its events'
      // memory (block vectors) was allocated there, and glibc frees a chunk cheapest on the thread
      // that allocated it; freed here, every chunk would take the producer's arena lock, contended
      // by the producer's own allocations (futex waits on both sides). NOTE: a handed-back batch
      // stays allocated until the next push, so only a small one goes back (at most
      // kSpentHandBackTasks tasks and kSpentHandBackBlocks blocks per lane, while idle too); a
      // large one, or one while the previous is still waiting, is destroyed here before the lane
      // sleeps.
      if (!batch.empty() && lane.spent.empty() && batch.size() <= kSpentHandBackTasks &&
          batch_blocks <= kSpentHandBackBlocks) {
        lane.spent.swap(batch);
      } else if (!batch.empty()) {
        lock.unlock();
        batch.clear();
        lock.lock();
      }
      batch_blocks = 0;
      if (!arrivals.empty()) {
        lock.unlock();
        // NOTE: barriers complete even on a failed lane, so callers never wait forever. Each
        // reference goes as its barrier arrives, so none outlives the batch past the next arrival.
        for (auto& [completion, healthy] : arrivals) std::exchange(completion, nullptr)->arrive(healthy);
        arrivals.clear();
        lock.lock();
      }
      if (stopping) return;
      lane.wake.wait(lock, [&] { return !lane.queue.empty(); });
      // NOTE: swap, not copy: the vectors keep their capacity (the spent ones come back empty from
      // the pushing side in exchange), so a busy lane stops allocating.
      batch.swap(lane.queue);
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      LaneTask& task = batch[i];
      if (task.kind == TaskKind::stop) {  // stop is always the last task ever queued
        stopping = true;
        break;
      }
      // One event ahead: the next event's buckets load while this one applies.
      if (i + 1 < batch.size()) prefetch_task(lane, batch[i + 1]);
      batch_blocks += carried_blocks(task.event);
      try {
        run_task(lane, task);
      } catch (const std::exception& error) {
        fail_lane(lane, error.what());
      } catch (...) {
        fail_lane(lane, "unknown exception");
      }
      if (task.completion) arrivals.emplace_back(task.completion, !lane.failed);
    }
  }
}

void LaneIndexer::prefetch_task(const Lane& lane, const LaneTask& task) {
  if (task.kind != TaskKind::event && task.kind != TaskKind::synthetic_event && task.kind != TaskKind::observed_event)
    return;
  const StorageTier tier = task.event.tier();
  prefetch_event_buckets(tier == StorageTier::device ? lane.lookup : lane.lower_lookups[tier_index(tier) - 1],
                         task.event);
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
    case TaskKind::observed_event:
      apply_counted(lane, task.event);
      if (lane.observation) lane.observation->record(lane.id, task.correlation_id, task.accepted_ns);
      return;
    case TaskKind::observe_install: lane.observation = std::move(task.observation); return;
    case TaskKind::observe_seal:
      if (lane.observation) lane.observation->seal(lane.id);
      return;
    case TaskKind::observe_drop: lane.observation.reset(); return;
    case TaskKind::barrier: return;
    case TaskKind::measure_lookups: {
      std::size_t bytes = 0;
      std::size_t entries = 0;
      auto count = [&](const DirectLookup& lookups) {
        for (const auto& [stream, lookup] : lookups) {
          bytes += lookup.chunk_bytes();
          entries += lookup.size();
        }
      };
      count(lane.lookup);
      for (const auto& lookups : lane.lower_lookups) count(lookups);
      task.completion->bytes.fetch_add(bytes, std::memory_order_relaxed);
      task.completion->entries.fetch_add(entries, std::memory_order_relaxed);
      return;
    }
    case TaskKind::remove_worker: {
      std::vector<WorkerWithDpRank> owned;
      for (const auto& [stream, lookup] : lane.lookup) {
        if (stream.worker_id == task.stream.worker_id) owned.push_back(stream);
      }
      for (const auto& lookup : lane.lower_lookups) {
        for (const auto& [stream, _] : lookup) {
          if (stream.worker_id == task.stream.worker_id) owned.push_back(stream);
        }
      }
      std::sort(owned.begin(), owned.end());
      owned.erase(std::unique(owned.begin(), owned.end()), owned.end());
      for (const auto stream : owned) remove_stream_in_every_tier(lane, stream);
      return;
    }
    case TaskKind::remove_stream: remove_stream_in_every_tier(lane, task.stream); return;
    case TaskKind::cleanup: {
      ConcurrentRadixTree* tree = task.tier == StorageTier::device ? &tree_ : lower_tree(task.tier);
      if (tree == nullptr) return;
      const CleanupStats stats = tree->run_cleanup();
      const std::size_t t = tier_index(task.tier);
      cleanup_nodes_removed_[t].fetch_add(stats.nodes_removed, std::memory_order_relaxed);
      cleanup_nodes_merged_[t].fetch_add(stats.nodes_merged, std::memory_order_relaxed);
      return;
    }
    case TaskKind::fail_for_test: throw std::runtime_error("injected lane failure");
    case TaskKind::stop: return;
  }
}

void LaneIndexer::remove_stream_in_every_tier(Lane& lane, WorkerWithDpRank stream) {
  tree_.remove_stream(lane.lookup, stream);
  for (std::size_t i = 0; i < kLowerTierCount; ++i) {
    if (ConcurrentRadixTree* tree = lower_trees_[i].load(std::memory_order_acquire)) {
      tree->remove_stream(lane.lower_lookups[i], stream);
    }
  }
}

ApplyResult LaneIndexer::apply_to_tiers(Lane& lane, const RouterEvent& event) {
  const StorageTier tier = event.tier();
  if (kind_of(event.event.data) == EventKind::cleared) {
    // Clears the stream in every tier whatever its storage_tier (see the header).
    ApplyResult result = tree_.apply_event(lane.lookup, event);
    for (std::size_t i = 0; i < kLowerTierCount; ++i) {
      if (ConcurrentRadixTree* tree = lower_trees_[i].load(std::memory_order_acquire)) {
        (void)tree->apply_event(lane.lower_lookups[i], event);  // a Cleared always succeeds
      }
    }
    return result;
  }
  if (tier == StorageTier::device) return tree_.apply_event(lane.lookup, event);
  return lower_tree_or_create(tier).apply_event(lane.lower_lookups[tier_index(tier) - 1], event);
}

ApplyResult LaneIndexer::apply_counted(Lane& lane, const RouterEvent& event) {
  ApplyResult result = apply_to_tiers(lane, event);
  applied_by_tier_[tier_index(event.tier())].fetch_add(1, std::memory_order_relaxed);
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
