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
// - Every barrier (flush, dump, remove_worker, reset) is a FIFO marker: it completes when the lane
//   has finished every task accepted before it. It says nothing about individual event results;
//   those are logged by the lane.
// - A lane whose task throws logs once, marks the whole indexer offline and keeps draining its
//   queue, completing barriers (as failed) so callers never hang. Enqueue then reports offline.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "libindexer/protocol.h"
#include "libindexer/radix_tree.h"

namespace kvidx {

using LaneId = std::size_t;

enum class IndexerStatus : std::uint8_t {
  ok,
  offline,  // a lane failed or the indexer shut down; the request was not (fully) carried out
};

struct ShardSizes {
  std::size_t worker_count = 0;  // streams holding at least one block
  std::size_t block_count = 0;   // blocks held, summed over streams
  std::size_t node_count = 0;    // attached tree nodes
};

// Counters of applied events, read without stopping the lanes (each value is exact, the set is
// not a snapshot taken at one instant).
struct LaneIndexerMetrics {
  static constexpr std::size_t kKinds = 3;     // EventKind
  static constexpr std::size_t kStatuses = 4;  // ApplyStatus
  std::array<std::array<std::uint64_t, kStatuses>, kKinds> applied{};  // [EventKind][ApplyStatus]
  std::vector<std::size_t> lane_queue_depths;                          // tasks waiting per lane

  std::uint64_t applied_total() const;
  std::uint64_t applied_with(ApplyStatus status) const;
};

class LaneIndexer {
 public:
  explicit LaneIndexer(std::size_t num_lanes);
  LaneIndexer(const LaneIndexer&) = delete;
  LaneIndexer& operator=(const LaneIndexer&) = delete;
  ~LaneIndexer();

  // Queues the event on its stream's lane.
  IndexerStatus enqueue_event(RouterEvent event);

  // FIFO barrier over every lane (blocking).
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

  // Barrier, then the tree as Stored events with event ids renumbered from 0; nullopt if offline.
  std::optional<std::vector<RouterEvent>> dump_events();
  ShardSizes shard_sizes() const;
  std::vector<WorkerId> get_workers() const;  // sorted, workers holding at least one block

  OverlapScores find_matches(std::span<const LocalBlockHash> query, bool early_exit = false) const {
    return tree_.find_matches(query, early_exit);
  }

  // Events applied so far by kind and result, and the current queue depth of every lane.
  LaneIndexerMetrics metrics() const;

  std::optional<LaneId> assigned_lane(WorkerWithDpRank stream) const;
  std::size_t lane_count() const { return lanes_.size(); }
  bool offline() const { return offline_.load(std::memory_order_acquire); }
  ConcurrentRadixTree& tree() { return tree_; }
  const ConcurrentRadixTree& tree() const { return tree_; }

  // Stops and joins every lane after it drains what is queued. Idempotent; the destructor calls it.
  void shutdown();

  // Test hook: makes `lane` throw while running its next task.
  IndexerStatus inject_lane_failure_for_test(LaneId lane);

 private:
  // Counts down as lanes pass a barrier; remembers whether any lane had failed.
  class Completion {
   public:
    explicit Completion(std::size_t lanes) : pending_(lanes) {}
    void arrive(bool lane_healthy);
    bool wait();  // true if every lane was healthy

   private:
    std::mutex mutex_;
    std::condition_variable done_;
    std::size_t pending_;
    bool healthy_ = true;
  };

  enum class TaskKind : std::uint8_t { event, barrier, remove_worker, remove_stream, cleanup, fail_for_test, stop };

  struct LaneTask {
    TaskKind kind = TaskKind::event;
    RouterEvent event;                      // kind == event
    WorkerWithDpRank stream;                // remove_stream; worker_id also for remove_worker
    std::shared_ptr<Completion> completion;  // barrier-like tasks
  };

  struct Lane {
    LaneId id = 0;
    std::mutex mutex;
    std::condition_variable wake;
    std::vector<LaneTask> queue;  // guarded by mutex
    bool stopping = false;        // guarded by mutex: no task is accepted after stop
    std::thread thread;
    // Owned by the lane thread only.
    DirectLookup lookup;
    bool failed = false;
  };

  LaneId lane_for(WorkerWithDpRank stream);
  bool push(Lane& lane, LaneTask task);
  IndexerStatus barrier_on(std::span<const LaneId> lanes, TaskKind kind, WorkerWithDpRank stream);
  void maybe_schedule_cleanup(LaneId lane);
  void run_lane(Lane& lane);
  void run_task(Lane& lane, LaneTask& task);
  void fail_lane(Lane& lane, const char* what);

  ConcurrentRadixTree tree_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<LaneId> all_lanes_;

  mutable std::shared_mutex assignment_mutex_;
  std::unordered_map<WorkerWithDpRank, LaneId, WorkerWithDpRankHasher> assignments_;  // guarded
  std::size_t next_assignment_ = 0;                                                    // guarded

  // NOTE: relaxed increments by the lane threads; readers only need each counter to be exact.
  std::array<std::array<std::atomic<std::uint64_t>, LaneIndexerMetrics::kStatuses>, LaneIndexerMetrics::kKinds>
      applied_{};

  std::atomic<bool> offline_{false};
  std::once_flag failure_logged_;
  std::mutex shutdown_mutex_;
  bool shut_down_ = false;  // guarded by shutdown_mutex_
};

}  // namespace kvidx
