// RoutingDecisionPruner: approximate mode's bookkeeping. Turns a router's routing decisions into
// synthetic Stored events, and TTL expiry / size-cap pruning into synthetic Removed events, for
// the caller to apply through each stream's own lane. No I/O, no threads of its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "libindexer/lanes/prune_config.h"
#include "libindexer/protocol.h"

namespace kvidx {

enum class DecisionStatus : std::uint8_t {
  ok,
  length_mismatch,  // local and sequence hash lists differ in length: nothing was recorded
};

struct RecordedDecision {
  DecisionStatus status = DecisionStatus::ok;
  // Stored event for the blocks the stream was not tracking yet, chained to the last tracked one;
  // absent when every block was already tracked (only renewed) or the decision was empty/rejected.
  std::optional<RouterEvent> store;
  std::size_t renewed_blocks = 0;
  std::size_t new_blocks = 0;
  // More blocks are tracked than max_tree_size: the caller should run collect_expired() soon.
  bool over_capacity = false;
};

// Contract
// - record_decision(stream, locals, sequence) says the router sent a request whose prompt blocks
//   are `locals` (with external hashes `sequence`, entry i naming block i of one chain from the
//   root) to `stream`. Every block of the decision gets a fresh expiry (now + ttl). Blocks the
//   stream did not track yet come back as one Stored event whose parent_hash is the sequence hash
//   just before the first new block (absent if the chain is new from the root), so the event
//   applies on a tree that has applied this pruner's earlier events for the stream.
// - collect_expired() forgets every block whose expiry is <= now, then, if more than
//   max_tree_size blocks remain tracked, the oldest-expiring ones (deepest first on ties) until
//   prune_target_size() remain. It returns one Removed event per affected stream (ordered by
//   stream) naming each forgotten block, descendants before their ancestors, so every named block
//   is still present in the tree when its name is applied.
// - Bookkeeping follows tree semantics: forgetting a block forgets the descendants the stream
//   tracked through it. remove_stream / remove_worker / forget_blocks without a sink forget
//   silently: the caller uses them when the tree already lost those blocks (an engine Cleared, a
//   synthetic Stored that the lane rejected). With a sink, remove_stream / remove_worker also
//   produce a Cleared event per stream, so a removal queued behind pending Stored events cannot
//   leave blocks in the tree that nothing will ever expire.
// - Event ids come from one counter shared by every event produced and are taken under the lock, so
//   they increase in the order events are produced, per stream and overall.
// - Ordering: the events for one stream must reach its lane in the order they were produced.
//   Callers with a single producing thread can use the returned values. Callers that produce from
//   several threads use the EventSink overloads, which hand each event to the sink while the
//   pruner's lock is held. The sink must not call back into the pruner, nor wait on a thread that
//   may itself be waiting for the pruner (e.g. a full lane queue whose consumer calls forget_blocks).
// - Every method is thread-safe. The clock is only read under the lock and must not go backwards.
class RoutingDecisionPruner {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Clock = std::function<TimePoint()>;
  using EventSink = std::function<void(RouterEvent&&)>;

  // Throws std::invalid_argument if config.validate() reports an error (a startup config bug).
  explicit RoutingDecisionPruner(PruneConfig config = {}, Clock clock = &std::chrono::steady_clock::now);

  RecordedDecision record_decision(WorkerWithDpRank stream, std::span<const LocalBlockHash> locals,
                                   std::span<const ExternalSequenceBlockHash> sequence);
  // Same, handing the Stored event (if any) to `sink` under the lock; the result's `store` is empty.
  RecordedDecision record_decision(WorkerWithDpRank stream, std::span<const LocalBlockHash> locals,
                                   std::span<const ExternalSequenceBlockHash> sequence, const EventSink& sink);

  std::vector<RouterEvent> collect_expired();
  // Same, handing each Removed event to `sink` under the lock. Returns the number of blocks forgotten.
  std::size_t collect_expired(const EventSink& sink);

  // Forget without events. Each returns the number of blocks forgotten.
  std::size_t remove_stream(WorkerWithDpRank stream);
  std::size_t remove_worker(WorkerId worker);
  // Same, handing the sink (under the lock) one synthetic Cleared event per stream that tracked
  // anything, for when the tree should drop the stream through its lane, behind its pending events.
  std::size_t remove_stream(WorkerWithDpRank stream, const EventSink& sink);
  std::size_t remove_worker(WorkerId worker, const EventSink& sink);
  std::size_t forget_blocks(WorkerWithDpRank stream, std::span<const ExternalSequenceBlockHash> hashes);

  // Earliest expiry among tracked blocks, for a pump that sleeps until then; absent if none.
  std::optional<TimePoint> next_expiry() const;
  bool over_capacity() const;
  std::size_t tracked_blocks() const;
  std::size_t tracked_blocks(WorkerWithDpRank stream) const;
  const PruneConfig& config() const { return config_; }

 private:
  struct TrackedBlock {
    std::optional<ExternalSequenceBlockHash> parent;  // absent: child of the root
    std::uint32_t depth = 0;                          // position in the chain, 0 at the root
    TimePoint expires;
    std::vector<ExternalSequenceBlockHash> children;  // tracked children only
  };
  using StreamBlocks = std::unordered_map<ExternalSequenceBlockHash, TrackedBlock>;

  // One entry per tracked block. Ordered by expiry, then deepest first, so a prune pass meets
  // descendants before their ancestors when expiries tie.
  struct ExpiryKey {
    TimePoint expires;
    std::uint32_t depth = 0;
    WorkerWithDpRank stream;
    ExternalSequenceBlockHash hash;
  };
  struct ExpiryOrder {
    bool operator()(const ExpiryKey& a, const ExpiryKey& b) const;
  };

  RecordedDecision record_locked(WorkerWithDpRank stream, std::span<const LocalBlockHash> locals,
                                 std::span<const ExternalSequenceBlockHash> sequence);
  std::vector<RouterEvent> collect_locked(std::size_t& forgotten);
  // Forgets `hash` and everything tracked below it, appending the forgotten hashes (descendants
  // before ancestors) to `out` when given. Returns the number forgotten.
  std::size_t forget_subtree(WorkerWithDpRank stream, ExternalSequenceBlockHash hash,
                             std::vector<ExternalSequenceBlockHash>* out);
  std::size_t forget_stream_locked(WorkerWithDpRank stream);
  std::vector<WorkerWithDpRank> streams_of(WorkerId worker) const;  // sorted
  // An event addressed to `stream`; the caller sets its id (next_event_id_++) and data.
  static RouterEvent synthetic_event(WorkerWithDpRank stream);
  RouterEvent cleared_event(WorkerWithDpRank stream);  // takes the next event id

  const PruneConfig config_;
  const Clock clock_;

  mutable std::mutex mutex_;
  std::unordered_map<WorkerWithDpRank, StreamBlocks, WorkerWithDpRankHasher> streams_;
  std::set<ExpiryKey, ExpiryOrder> by_expiry_;
  std::size_t total_blocks_ = 0;  // == by_expiry_.size() == sum of streams_' sizes
  std::uint64_t next_event_id_ = 0;
};

}  // namespace kvidx
