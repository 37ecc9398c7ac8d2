// LaneIndexer: the writer side of kvidx. N lane threads apply RouterEvents to one shared
// ConcurrentRadixTree; reads (find_matches) run inline on the caller's thread.
//
// Lane rules
// - Each (worker, rank) stream is assigned a lane on first use, round robin, and keeps it for the
//   indexer's lifetime. The assignment is never freed, not even by removal: a stream's later
//   events must queue behind its removal on the same FIFO, or a restore could overtake it.
//   A cold remove_worker_dp_rank reserves a lane for that reason; a cold remove_worker does not
//   (it runs on every lane).
// - A lane owns the WorkerLookups of its streams (DirectLookup); no other thread touches them.
// - Every barrier (flush, dump, shard_sizes, get_workers, remove_worker, reset) is a FIFO marker: it completes when the
// lane
//   has finished every task accepted before it. It says nothing about individual event results;
//   those are logged by the lane.
// - A lane whose task throws logs once, marks the whole indexer offline and keeps draining its
//   queue, completing barriers (as failed) so callers never hang. Enqueue then reports offline.
//
// Approximate mode (options.prune set)
// - process_routing_decision records the decision in a RoutingDecisionPruner, which hands the
//   synthetic Stored event to the stream's lane while holding its own lock; expiry and the size
//   cap hand synthetic Removed events to the same lanes the same way (prune pump thread, and
//   flush before its barrier). So per stream, synthetic events reach the lane in the order the
//   pruner produced them, and the pruner tracks exactly what those events leave in the tree.
// - Lock order: decision_order_mutex_ -> pruner lock -> assignment / lane queue locks. The sink
//   never waits (lane queues are unbounded), and a lane calls into the pruner holding none of
//   these, which is what the pruner's deadlock warning asks.
// - Anything that drops a stream's blocks outside the pruner (remove_worker*, reset, engine
//   Removed/Cleared events) forgets them in the pruner and queues the drop as one step under
//   decision_order_mutex_ held exclusively: a decision is then either wholly before the drop
//   (its Stored is queued ahead of it and wiped by it, and the pruner forgot it) or wholly after.
//
// Storage tiers (protocol.h StorageTier)
// - Each tier is its own ConcurrentRadixTree: `tree()` is device (what find_matches and every
//   device-only caller see); host_pinned, disk and external trees are created on the first event
//   of that tier and live as long as the indexer (readers hold plain pointers to them).
// - Tiers share the lanes: a stream's events go to its one lane whatever their tier, so its events
//   apply in order across tiers. A lane keeps one DirectLookup per tier (a block's names per tier).
// - Cleared (and a stream's removal or reset) clears the stream in every tier: the event stream and
//   its event_id sequence are per (worker, rank), not per tier; vLLM's AllBlocksCleared carries no
//   medium, and a publisher restart (which the intake turns into a Cleared) loses the engine's
//   offloaded copies as well as its GPU blocks.
//
// Bench observation (lane_observation.h)
// - Observed events and the observe_* barriers are their own task kinds: the plain enqueue path
//   pays nothing for them. An observation reaches the lanes only through its ObservationLease.
//
// Files: lane_indexer.cpp (lanes, producers, barriers, removal, readers),
// lane_indexer_approximate.cpp (approximate mode), lane_observation.cpp (bench observation).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "libindexer/lanes/prune_config.h"
#include "libindexer/lanes/routing_decision_pruner.h"
#include "libindexer/protocol.h"
#include "libindexer/tier_scores.h"
#include "libindexer/tree/radix_tree.h"

namespace kvidx {

using LaneId = std::size_t;

struct ObservationRun;  // lane_observation.h

enum class IndexerStatus : std::uint8_t {
  ok,
  offline,  // a lane failed or the indexer shut down; the request was not (fully) carried out
};

struct ShardSizes {
  // Device tree (the one `scores` answer for).
  std::size_t worker_count = 0;  // streams holding at least one block
  std::size_t block_count = 0;   // blocks held, summed over streams
  std::size_t node_count = 0;    // attached tree nodes
  // Blocks no stream holds any more, still attached until the next cleanup detaches them (an
  // upper bound; see ConcurrentRadixTree::dead_block_estimate).
  std::size_t blocks_pending_cleanup = 0;
  // Every tier, device included (index tier_index): streams holding a block there, blocks held.
  std::array<std::size_t, kStorageTierCount> streams_by_tier{};
  std::array<std::size_t, kStorageTierCount> blocks_by_tier{};
  std::array<std::size_t, kStorageTierCount> nodes_by_tier{};
};

// Where the index's bytes go (memory_accounting.h): every tier's tree and the lanes' lookups.
struct IndexMemory {
  TreeMemory trees;
  std::size_t lookup_bytes = 0;  // per-stream lookups (external hash -> node, depth), dropped marks
  std::size_t lookup_entries = 0;

  std::size_t total() const { return trees.total() + lookup_bytes; }
};

struct ApproximateModeMetrics {
  bool enabled = false;
  std::uint64_t decisions_recorded = 0;     // process_routing_decision calls that were recorded
  std::uint64_t decisions_rejected = 0;     // length mismatch: nothing recorded
  std::uint64_t synthetic_stored = 0;       // synthetic Stored events queued on lanes
  std::uint64_t synthetic_removed = 0;      // synthetic Removed events queued (expiry or size cap)
  std::uint64_t synthetic_not_applied = 0;  // synthetic events the tree did not apply cleanly
  std::uint64_t blocks_pruned = 0;          // blocks forgotten by expiry or the size cap
  std::size_t tracked_blocks = 0;           // blocks the pruner tracks now
};

// Counters of applied events, read without stopping the lanes (each value is exact, the set is
// not a snapshot taken at one instant).
struct LaneIndexerMetrics {
  static constexpr std::size_t kKinds = 3;                             // EventKind
  static constexpr std::size_t kStatuses = 4;                          // ApplyStatus
  std::array<std::array<std::uint64_t, kStatuses>, kKinds> applied{};  // [EventKind][ApplyStatus]
  std::array<std::uint64_t, kStorageTierCount> applied_by_tier{};      // events applied, by their tier
  // Cleanup passes, by tree: dead nodes cut off, and only children folded into their parent.
  std::array<std::uint64_t, kStorageTierCount> cleanup_nodes_removed{};
  std::array<std::uint64_t, kStorageTierCount> cleanup_nodes_merged{};
  std::vector<std::size_t> lane_queue_depths;  // tasks waiting per lane
  // Synthetic events are also counted in `applied` (they go through the tree like any event).
  ApproximateModeMetrics approximate;

  std::uint64_t applied_total() const;
  std::uint64_t applied_with(ApplyStatus status) const;
};

struct LaneIndexerOptions {
  std::size_t num_lanes = 1;
  // Set: approximate mode (routing decisions indexed with a TTL and a size cap). Must validate.
  std::optional<PruneConfig> prune{};
  // Read by the pruner and the prune pump; must not go backwards. Injectable for tests.
  RoutingDecisionPruner::Clock clock = &std::chrono::steady_clock::now;
  // Longest the prune pump sleeps between checks, whatever the next expiry says (bounds the lag
  // of a clock that does not follow real time, e.g. a test's manual clock).
  std::chrono::milliseconds prune_pump_max_sleep{1000};
};

enum class RoutingDecisionStatus : std::uint8_t {
  recorded,         // new blocks (if any) queued on the stream's lane, known blocks renewed
  not_approximate,  // the indexer was built without a PruneConfig: nothing recorded
  length_mismatch,  // local and sequence hash lists differ in length: nothing recorded
  offline,
};

std::string_view to_string(RoutingDecisionStatus status);

class LaneIndexer {
 public:
  explicit LaneIndexer(std::size_t num_lanes);
  // Throws std::invalid_argument if options.prune is set and does not validate (a config bug).
  explicit LaneIndexer(LaneIndexerOptions options);
  LaneIndexer(const LaneIndexer&) = delete;
  LaneIndexer& operator=(const LaneIndexer&) = delete;
  ~LaneIndexer();

  // Queues the event on its stream's lane.
  IndexerStatus enqueue_event(RouterEvent event);
  // Queues each event on its stream's lane, keeping their order per stream (moves from `events`).
  // One lock and one wake-up per lane touched instead of per event. Not ok when the indexer went
  // offline: then some events may have been queued and the rest dropped.
  IndexerStatus enqueue_events(std::span<RouterEvent> events);

  // FIFO barrier over every lane (blocking): returns once every event queued before it is applied
  // and its lane has let go of it (freed it, or handed it back to be freed by the next push: at
  // most kSpentHandBackBlocks blocks' worth per lane). In approximate mode it first queues the
  // synthetic Removed events of everything expired (or over the size cap) by now.
  IndexerStatus flush();
  // FIFO barrier over the lane of one stream (assigning it if new).
  IndexerStatus flush_stream(WorkerWithDpRank stream);

  // Drops every rank of the worker: barrier on every lane (each drops the ranks it owns), then a
  // tree sweep; returns when done.
  IndexerStatus remove_worker(WorkerId worker_id);
  // Queues the removal of one rank on that rank's lane (reserving the lane if new); does not wait.
  IndexerStatus remove_worker_dp_rank(WorkerId worker_id, DpRank dp_rank);
  // As remove_worker_dp_rank, then waits until the removal has been applied.
  IndexerStatus reset_worker_dp_rank_and_wait(WorkerId worker_id, DpRank dp_rank);

  // Approximate mode: stores the decision's blocks for `stream` through its lane as if the worker
  // had reported them, each living options.prune->ttl after the last decision naming it. Returns
  // without waiting for the lane. Thread-safe.
  RoutingDecisionStatus process_routing_decision(WorkerWithDpRank stream, std::span<const LocalBlockHash> locals,
                                                 std::span<const ExternalSequenceBlockHash> sequence);
  bool approximate() const { return pruner_ != nullptr; }
  // Blocks the pruner tracks for `stream` (0 when not approximate).
  std::size_t tracked_blocks(WorkerWithDpRank stream) const;

  // Barrier, then the tree as Stored events with event ids renumbered from 0; nullopt if offline.
  std::optional<std::vector<RouterEvent>> dump_events();
  // FIFO barriers, like the reference's Stats task: they wait until every lane has applied what
  // was enqueued before the call, so the answer covers every such event (a failed lane still
  // completes the barrier; the counts are then those of what was applied).
  ShardSizes shard_sizes();
  // A barrier, then the bytes of the trees and of every lane's lookups (the lanes count their own).
  // Walks every node: for benches and tests, not for metrics scraped often.
  IndexMemory memory();
  std::vector<WorkerId> get_workers();  // sorted, workers holding at least one block
  // The counts as they stand, without waiting for the lanes (metrics gauges, scraped often).
  ShardSizes shard_sizes_now() const;

  // Device scores only (the tree Dynamo's router reads).
  OverlapScores find_matches(std::span<const LocalBlockHash> query, bool early_exit = false) const {
    return tree_.find_matches(query, early_exit);
  }
  // Device scores plus each lower tier's (a tier never stored costs one pointer load).
  TieredOverlapScores find_tiered_matches(std::span<const LocalBlockHash> query, bool early_exit = false) const;

  // Events applied so far by kind and result, and the current queue depth of every lane.
  LaneIndexerMetrics metrics() const;

  std::optional<LaneId> assigned_lane(WorkerWithDpRank stream) const;
  std::size_t lane_count() const { return lanes_.size(); }
  bool offline() const { return offline_.load(std::memory_order_acquire); }
  ConcurrentRadixTree& tree() { return tree_; }
  const ConcurrentRadixTree& tree() const { return tree_; }
  // The tree of `tier`; nullptr for a lower tier that no event has used yet.
  const ConcurrentRadixTree* tier_tree(StorageTier tier) const;

  // Stops the prune pump, then stops and joins every lane after it drains what is queued.
  // Idempotent; the destructor calls it.
  void shutdown();

 private:
  // Bench observation (lane_observation.cpp) drives the observe_* tasks through its lease.
  friend class ObservationLease;
  // Failure injection for tests queues a fail_for_test task (tests/support/lane_indexer_test_peer.h).
  friend class LaneIndexerTestPeer;

  // Counts down as lanes pass a barrier; remembers whether any lane had failed.
  class Completion {
   public:
    explicit Completion(std::size_t lanes) : pending_(lanes) {}
    void arrive(bool lane_healthy);
    bool wait();  // true if every lane was healthy

    // What the lanes of a measuring barrier add up (read after wait()).
    std::atomic<std::size_t> bytes{0};
    std::atomic<std::size_t> entries{0};

   private:
    std::mutex mutex_;
    std::condition_variable done_;
    std::size_t pending_;
    bool healthy_ = true;
  };

  enum class TaskKind : std::uint8_t {
    event,
    synthetic_event,  // produced by the pruner
    observed_event,
    barrier,
    measure_lookups,  // a barrier that adds the lane's lookup bytes to its completion
    remove_worker,
    remove_stream,
    cleanup,
    observe_install,
    observe_seal,
    observe_drop,
    fail_for_test,  // throws on the lane: LaneIndexerTestPeer's failure injection
    stop,
  };

  struct LaneTask {
    TaskKind kind = TaskKind::event;
    RouterEvent event;                              // *_event kinds
    WorkerWithDpRank stream;                        // remove_stream; worker_id also for remove_worker
    std::shared_ptr<Completion> completion;         // barrier-like tasks
    std::shared_ptr<ObservationRun> observation{};  // observe_install
    std::uint32_t correlation_id = 0;               // observed_event
    std::uint64_t accepted_ns = 0;                  // observed_event
    StorageTier tier = StorageTier::device;         // cleanup: the tree to clean
  };

  struct Lane {
    LaneId id = 0;
    std::mutex mutex;
    std::condition_variable wake;
    std::vector<LaneTask> queue;  // guarded by mutex
    // Guarded by mutex: tasks the lane applied, destroyed by the next push (run_lane says why).
    std::vector<LaneTask> spent;
    bool stopping = false;  // guarded by mutex: no task is accepted after stop
    std::thread thread;
    // Owned by the lane thread only.
    DirectLookup lookup;                                      // device tree
    std::array<DirectLookup, kLowerTierCount> lower_lookups;  // index tier_index - 1
    bool failed = false;
    std::shared_ptr<ObservationRun> observation;  // installed observation, if any
  };

  LaneId lane_for(WorkerWithDpRank stream);
  bool push(Lane& lane, LaneTask task);
  bool push_all(Lane& lane, std::vector<LaneTask>& tasks);  // moves from and clears `tasks`
  // Where push and push_all take over a lane's applied tasks (under its lock) to destroy them on
  // the pushing thread once the lock is released.
  static std::vector<LaneTask>& spent_tasks();
  // The largest applied batch a lane hands back (run_lane): what it may keep allocated until the
  // next push, e.g. over an idle spell (4096 tasks; 65536 blocks, 1 MiB of Stored blocks).
  static constexpr std::size_t kSpentHandBackTasks = 4096;
  static constexpr std::size_t kSpentHandBackBlocks = 65536;
  IndexerStatus barrier_on(std::span<const LaneId> lanes, TaskKind kind, WorkerWithDpRank stream);
  // Queues a barrier-like task on `lanes`; wait on the result with finish_barrier.
  std::shared_ptr<Completion> start_barrier(std::span<const LaneId> lanes, LaneTask task);
  IndexerStatus finish_barrier(Completion& completion);

  // Approximate mode (lane_indexer_approximate.cpp).
  bool enqueue_synthetic(RouterEvent event);  // the pruner's sink: never waits
  void collect_expired_into_lanes();
  void kick_prune_pump();
  void run_prune_pump();
  // The lock that orders pruner forgets against decisions, held only in approximate mode.
  std::unique_lock<std::shared_mutex> exclusive_decision_order();
  void forget_engine_removal(const RouterEvent& event);

  ApplyResult apply_counted(Lane& lane, const RouterEvent& event);
  ApplyResult apply_to_tiers(Lane& lane, const RouterEvent& event);
  void remove_stream_in_every_tier(Lane& lane, WorkerWithDpRank stream);
  ConcurrentRadixTree* lower_tree(StorageTier tier) const {
    return lower_trees_[tier_index(tier) - 1].load(std::memory_order_acquire);
  }
  ConcurrentRadixTree& lower_tree_or_create(StorageTier tier);
  // Visit(StorageTier, ConcurrentRadixTree&) for the device tree and every lower tree made so far.
  template <typename Visit>
  void for_each_tree(Visit&& visit) {
    visit(StorageTier::device, tree_);
    for (std::size_t i = 0; i < kLowerTierCount; ++i) {
      if (auto* tree = lower_trees_[i].load(std::memory_order_acquire)) visit(kStorageTiers[i + 1], *tree);
    }
  }
  template <typename Visit>
  void for_each_tree(Visit&& visit) const {
    visit(StorageTier::device, tree_);
    for (std::size_t i = 0; i < kLowerTierCount; ++i) {
      if (const auto* tree = lower_trees_[i].load(std::memory_order_acquire)) visit(kStorageTiers[i + 1], *tree);
    }
  }
  void maybe_schedule_cleanup(LaneId lane);
  void run_lane(Lane& lane);
  void run_task(Lane& lane, LaneTask& task);
  // Starts loading the lookup buckets an event task will touch (prefetch_event_buckets); nothing
  // for other tasks.
  static void prefetch_task(const Lane& lane, const LaneTask& task);
  void fail_lane(Lane& lane, const char* what);

  ConcurrentRadixTree tree_;  // device
  // Lower tiers (index tier_index - 1), made on first use under lower_trees_mutex_ and published
  // through the atomics; never freed before the indexer, so readers may keep the raw pointers.
  std::array<std::atomic<ConcurrentRadixTree*>, kLowerTierCount> lower_trees_{};
  std::array<std::unique_ptr<ConcurrentRadixTree>, kLowerTierCount> lower_owned_;  // guarded
  std::mutex lower_trees_mutex_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<LaneId> all_lanes_;

  mutable std::shared_mutex assignment_mutex_;
  std::unordered_map<WorkerWithDpRank, LaneId, WorkerWithDpRankHasher> assignments_;  // guarded
  std::size_t next_assignment_ = 0;                                                   // guarded

  // NOTE: relaxed increments by the lane threads; readers only need each counter to be exact.
  std::array<std::array<std::atomic<std::uint64_t>, LaneIndexerMetrics::kStatuses>, LaneIndexerMetrics::kKinds>
      applied_{};
  std::array<std::atomic<std::uint64_t>, kStorageTierCount> applied_by_tier_{};
  std::array<std::atomic<std::uint64_t>, kStorageTierCount> cleanup_nodes_removed_{};
  std::array<std::atomic<std::uint64_t>, kStorageTierCount> cleanup_nodes_merged_{};

  // Approximate mode (all null / idle otherwise).
  const LaneIndexerOptions options_;
  std::unique_ptr<RoutingDecisionPruner> pruner_;
  mutable std::shared_mutex decision_order_mutex_;
  std::thread prune_pump_;
  std::mutex pump_mutex_;
  std::condition_variable pump_wake_;
  bool pump_stop_ = false;  // guarded by pump_mutex_
  bool pump_kick_ = false;  // guarded by pump_mutex_
  std::atomic<std::uint64_t> decisions_recorded_{0};
  std::atomic<std::uint64_t> decisions_rejected_{0};
  std::atomic<std::uint64_t> synthetic_stored_{0};
  std::atomic<std::uint64_t> synthetic_removed_{0};
  std::atomic<std::uint64_t> synthetic_not_applied_{0};
  std::atomic<std::uint64_t> blocks_pruned_{0};

  std::atomic<bool> observation_active_{false};  // claimed by one ObservationLease at a time

  std::atomic<bool> offline_{false};
  std::once_flag failure_logged_;
  std::mutex shutdown_mutex_;
  bool shut_down_ = false;  // guarded by shutdown_mutex_
};

}  // namespace kvidx
