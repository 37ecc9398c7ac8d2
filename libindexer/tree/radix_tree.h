// ConcurrentRadixTree: the compressed radix tree of KV-cache blocks shared by every writer lane and
// every reader. It applies RouterEvents for one (worker, rank) stream at a time per caller and
// answers prefix-overlap queries concurrently with them.
//
// One job per file: radix_tree.cpp (construction, apply_event dispatch, per-stream counts),
// tree_store.cpp, tree_remove.cpp, tree_match.cpp (find_matches), tree_cleanup.cpp, tree_merge.cpp
// (cleanup folding an only child into its parent), tree_dump.cpp (dump_events, edge lengths). Nodes: radix_node.h;
// per-stream state: worker_lookup.h and worker_registry.h. The invariants below hold across all of them.
//
// Concurrency scheme and invariants
// - Every node has a NodeLock (node_lock.h): a 4-byte reader-writer lock that prefers writers.
//   Hence no thread takes a node's lock while it holds that node's lock, shared or not (with a
//   writer waiting in between, the second shared lock would wait forever). Readers take shared
//   locks hand over hand from the root (the child is locked before the parent is released), so a
//   reader never sees a node after it left the tree unless it was already inside it, and reads each
//   node's edge, coverage and children as one consistent state.
// - Writers take exclusive locks, always ancestor before descendant (root-down descent, split
//   continuations, subtree walks). Nobody locks upward, so there is no lock-order cycle. A writer
//   holds at most two node locks at a time, and only while moving down.
// - A writer may enter a node directly through its stream's WorkerLookup. It then checks
//   `detached_` under the node's lock: cleanup only detaches nodes no stream holds, so a detached
//   node never holds the writer's block and the event treats the block as absent (unless the node
//   was merged into its parent: then the writer follows `merged_into_`, see below).
// - Per stream, coverage is prefix-closed: if a stream holds any block of a node, it holds every
//   edge of the node's ancestors fully. Stores add coverage top-down; removes cut a node and then
//   drop the stream from the node's descendants. A reader therefore only descends through nodes
//   the stream holds fully, and a score never exceeds a depth the stream held at some instant.
// - A node keeps its identity, start depth and first block forever: a split keeps the prefix in
//   the node and moves the remainder (edge, coverage beyond the cut, children) to a new suffix
//   child, recorded as the node's `continuation_`. Every change of shape bumps `shape_version_`;
//   a plan or scan made under a shared lock commits only if the version is unchanged.
// - One stream's events are applied by one caller at a time (its lane); different streams' events
//   run in parallel. A stream's WorkerLookup belongs to that caller and is never shared.
// - A node grows its edge in place only while it has never had a child (`sealed_`); a node that
//   was ever internal gets new children instead, also after cleanup removed its dead children.
// - A node whose last full holder leaves (cut, drop, sweep) detaches its children at once: by prefix
//   closure nobody can hold them. Other nodes no stream holds stay attached until run_cleanup()
//   detaches them; detached subtrees are dismantled iteratively and freed once the last stale
//   lookup reference goes.
// - Cleanup also merges: a non-root node left with one child whose holders are exactly the node's
//   (each a full holder of the node) takes the child's edge, coverage, names and children
//   (tree_merge.cpp), so split points that stopped mattering do not pile up under prefix churn.
//   Scores and dumps do not change (the same streams hold the same blocks at the same depths). The
//   merged-away child is detached with `merged_into_` pointing at the node: a lookup entry still
//   pointing at it follows that upward (releasing the child's lock first) and finds its block at
//   the same depth. Dumps, which do not read hand over hand, hold `merge_gate_` shared; a merge
//   only try-locks it, so it never waits for a dump (it is left to the next cleanup).
// - External hashes are per-stream names (edge_names.h): a block is its local-hash path; a stream's
//   Removed, Stored parent and dump use the name that stream gave it (RadixNode::name_of).
// - Every node's `edge_fingerprint_` is the fingerprint of its edge at its depths
//   (edge_fingerprint.h), kept under the node's exclusive lock by every change of the edge (growth,
//   split, merge, freeing); find_matches takes a query that reaches past an edge with an equal
//   fingerprint as matching the whole edge.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "libindexer/protocol.h"
#include "libindexer/tree/memory_accounting.h"
#include "libindexer/tree/radix_node.h"
#include "libindexer/tree/worker_lookup.h"
#include "libindexer/tree/worker_registry.h"

namespace kvidx {

enum class ApplyStatus : std::uint8_t {
  ok,
  parent_not_found,  // Stored whose parent the stream does not hold: nothing was applied
  block_not_found,   // Removed naming blocks the stream never stored (or already named removed, or
                     // cleared since): the others were applied. A block dropped by an earlier cut of
                     // an ancestor and not named yet is known: naming it is ok.
  invalid,           // malformed event (e.g. Stored without blocks): nothing was applied
};

struct ApplyResult {
  ApplyStatus status = ApplyStatus::ok;
  std::string error;  // empty when ok

  bool ok() const { return status == ApplyStatus::ok; }
  static ApplyResult success() { return {}; }
};

std::string_view to_string(ApplyStatus status);

struct CleanupStats {
  std::size_t nodes_removed = 0;
  std::size_t blocks_removed = 0;
  std::size_t nodes_merged = 0;  // children folded into their parent (tree_merge.cpp)
};

class ConcurrentRadixTree {
 public:
  ConcurrentRadixTree();
  ConcurrentRadixTree(const ConcurrentRadixTree&) = delete;
  ConcurrentRadixTree& operator=(const ConcurrentRadixTree&) = delete;
  ~ConcurrentRadixTree();

  // Applies one event of `event.stream()`; never throws for bad input.
  ApplyResult apply_event(DirectLookup& lookup, const RouterEvent& event);

  // Prefix-overlap scores for `query`; safe concurrently with writers.
  OverlapScores find_matches(std::span<const LocalBlockHash> query, bool early_exit) const;

  // Drops everything `stream` holds, guided by its lookup (cost ~ its blocks), and erases the lookup.
  void remove_stream(DirectLookup& lookup, WorkerWithDpRank stream);
  // Drops every rank of `worker_id` by walking the tree from the root through the nodes its ranks hold.
  void remove_worker_sweep(WorkerId worker_id);

  // The tree as Stored events: per stream, one event per stretch of its coverage between branching
  // nodes (a linear chain is one event, across pass-through nodes), under the stream's own external
  // hashes; an event's parent comes before it.
  std::vector<RouterEvent> dump_events() const;

  std::size_t node_count() const { return node_count_.load(std::memory_order_relaxed); }
  std::size_t attached_block_count() const { return attached_blocks_.load(std::memory_order_relaxed); }
  // Blocks on edges that lost their last holder since the last cleanup (an upper bound: a node
  // stored again before cleanup is not subtracted). Every attached node either holds a block of
  // some stream or is one of these, so nodes <= held blocks + this + 1 (the root).
  std::size_t dead_block_estimate() const { return dead_blocks_estimate_.load(std::memory_order_relaxed); }
  std::vector<std::size_t> node_edge_lengths() const;
  // Bytes of every attached node and what it owns (tree_memory.cpp); the lanes' lookups are counted
  // by LaneIndexer::memory.
  TreeMemory memory() const;
  std::size_t block_count(WorkerWithDpRank stream) const;
  // (stream, blocks) for every stream that holds at least one block.
  std::vector<std::pair<WorkerWithDpRank, std::size_t>> stream_block_counts() const;

  // Cleanup trigger: dead blocks >= max(kMinDeadBlocks, live / 8), or kCleanupInterval since the
  // last run with something dead. Returns true once per scheduled run (the caller must then call
  // run_cleanup or cancel_scheduled_cleanup).
  bool try_schedule_cleanup();
  void cancel_scheduled_cleanup() { cleanup_scheduled_.store(false, std::memory_order_release); }
  CleanupStats run_cleanup();

  static constexpr std::size_t kMinDeadBlocks = 65'536;
  static constexpr std::chrono::minutes kCleanupInterval{5};

 private:
  // The reference's test-only entry points live on the test side (tests/support/radix_tree_test_peer.h).
  friend class RadixTreeTestPeer;

  using ExclusiveLock = std::unique_lock<NodeLock>;
  using SharedLock = std::shared_lock<NodeLock>;

  struct LockedBlock {
    NodeRef node;
    ExclusiveLock lock;
    std::uint32_t position = 0;  // of the block inside node's edge
  };

  // Dispatch, and the locator the store and remove paths share (radix_tree.cpp).
  WorkerLookup* lookup_for(DirectLookup& lookup, WorkerWithDpRank stream, ApplyResult& failure);
  std::optional<LockedBlock> locate_held_block(WorkerSlot slot, NodeRef start, ExternalSequenceBlockHash hash,
                                               std::uint32_t depth) const;

  // Store path (tree_store.cpp).
  ApplyResult apply_stored(WorkerLookup& lookup, WorkerSlot slot, const KvCacheStoreData& data);
  ApplyResult store_after(WorkerLookup& lookup, WorkerSlot slot, const LookupEntry& parent_entry,
                          ExternalSequenceBlockHash parent, std::span<const StoredBlock> blocks, const NodeRef& start);
  ApplyResult store_from_root(WorkerLookup& lookup, WorkerSlot slot, std::span<const StoredBlock> blocks);
  void extend_from(WorkerLookup& lookup, WorkerSlot slot, NodeRef node, ExclusiveLock lock, std::uint32_t offset,
                   std::span<const StoredBlock> blocks);
  void split_locked(RadixNode& node, std::uint32_t keep);
  NodeRef new_child_locked(RadixNode& parent, WorkerSlot slot, std::span<const StoredBlock> blocks);

  // Remove path (tree_remove.cpp).
  ApplyResult apply_removed(WorkerLookup& lookup, WorkerSlot slot, std::span<const ExternalSequenceBlockHash> hashes,
                            const NodeRef& hint);
  void cut_locked(WorkerLookup* lookup, WorkerSlot slot, LockedBlock& at);
  // Detaches every child of `node` (locked exclusively, without a full holder any more) and
  // returns them for dismantle_all, to be called once the node's lock is released.
  std::vector<NodeRef> detach_children_locked(RadixNode& node);
  void dismantle_all(std::vector<NodeRef> subtrees);
  void drop_from_subtrees(WorkerSlot slot, std::vector<NodeRef> stack);
  void drop_stream(WorkerLookup& lookup, WorkerSlot slot);
  void sweep_slots(const std::vector<WorkerSlot>& slots);

  // A node whose coverage went empty (a cut, a sweep, a split leaving an unheld suffix) counts its
  // blocks as dead until the next cleanup.
  void note_coverage_lost(const RadixNode& node) {
    dead_blocks_estimate_.fetch_add(node.edge_.size(), std::memory_order_relaxed);
  }

  // Cleanup (tree_cleanup.cpp).
  void dismantle(NodeRef subtree_root, CleanupStats& stats);
  // Detaches the `candidates` that are still children of `parent` (locked exclusively) and still
  // held by nobody, appending them to `detached`; returns how many.
  std::size_t detach_dead_children_locked(RadixNode& parent, const std::vector<NodeRef>& candidates,
                                          std::vector<NodeRef>& detached);

  // Merging (tree_merge.cpp). Whether `child`, the only child of `parent`, may be folded into it;
  // the caller holds both locks (shared is enough to look, exclusive to merge).
  static bool can_merge(const RadixNode& parent, const RadixNode& child);
  // Folds the only child of `parent` (locked exclusively, not the root) into it while it has one
  // that can_merge; returns how many were folded.
  std::size_t merge_only_children_locked(const NodeRef& parent);
  static std::int64_t steady_now_ns();  // the cleanup clock

  // Calls visit(const RadixNode&) for every attached node, the root included, each under its
  // shared lock (top-down, one node at a time; safe while writers run).
  template <typename Visit>
  void for_each_node(Visit&& visit) const {
    std::vector<NodeRef> stack{root_};
    while (!stack.empty()) {
      NodeRef node = std::move(stack.back());
      stack.pop_back();
      SharedLock lock(node->mutex_);
      visit(static_cast<const RadixNode&>(*node));
      for (const auto& [key, child] : node->children_.entries()) stack.push_back(child);
    }
  }

  NodeRef root_;
  WorkerRegistry registry_;
  // Held shared by dump_events for its whole walk; a merge try-locks it exclusively (see above).
  mutable std::shared_mutex merge_gate_;
  std::atomic<std::size_t> node_count_{0};       // attached nodes, root excluded
  std::atomic<std::size_t> attached_blocks_{0};  // blocks on attached edges, dead ones included
  std::atomic<std::size_t> dead_blocks_estimate_{0};
  std::atomic<bool> cleanup_scheduled_{false};
  std::atomic<std::int64_t> last_cleanup_ns_{0};
};

}  // namespace kvidx
