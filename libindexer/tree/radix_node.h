// RadixNode: one node of the compressed radix tree. Its edge is a run of blocks; its children are
// keyed by the local hash of their edge's first block; its EdgeCoverage says which streams hold
// how much of the edge. Nodes are reference counted (NodeRef) because per-stream lookups point at
// them directly and may outlive a node's place in the tree. Locking rules are the tree's; see
// radix_tree.h. The public methods below lock the node themselves: they are the reference's
// optimistic store steps (scan or plan under a shared lock, commit only if the shape version is
// unchanged). The tree's own store path takes exclusive locks and does not call them; the ported
// stale-cursor tests drive them by hand.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "libindexer/protocol.h"
#include "libindexer/tree/edge_coverage.h"
#include "libindexer/tree/edge_fingerprint.h"
#include "libindexer/tree/edge_names.h"
#include "libindexer/tree/node_lock.h"

namespace kvidx {

class RadixNode;

// Owning, intrusive reference to a node.
class NodeRef {
 public:
  NodeRef() = default;
  explicit NodeRef(RadixNode* node) noexcept;
  NodeRef(const NodeRef& other) noexcept : NodeRef(other.node_) {}
  NodeRef(NodeRef&& other) noexcept : node_(std::exchange(other.node_, nullptr)) {}
  NodeRef& operator=(NodeRef other) noexcept {
    std::swap(node_, other.node_);
    return *this;
  }
  ~NodeRef();

  // A reference whose count the caller already took (the inverse of release()).
  static NodeRef adopt(RadixNode* node) noexcept {
    NodeRef out;
    out.node_ = node;
    return out;
  }
  // Gives up this reference without dropping the count; the caller now owns it.
  RadixNode* release() noexcept { return std::exchange(node_, nullptr); }
  // Takes or drops `count` references in one atomic step (runs of WorkerLookup entries). Dropping
  // the last one deletes the node.
  static void acquire_many(RadixNode* node, std::uint32_t count) noexcept;
  static void release_many(RadixNode* node, std::uint32_t count) noexcept;

  RadixNode* get() const noexcept { return node_; }
  RadixNode* operator->() const noexcept { return node_; }
  RadixNode& operator*() const noexcept { return *node_; }
  explicit operator bool() const noexcept { return node_ != nullptr; }
  friend bool operator==(const NodeRef& a, const NodeRef& b) { return a.node_ == b.node_; }

 private:
  RadixNode* node_ = nullptr;
};

// Children keyed by first local hash: a short vector scanned linearly, plus a hash index once the
// fan-out grows (the root and popular prefixes). The index is open addressing over positions in
// the vector, so a lookup on a wide node reads one slot, then the entry: no per-child allocation.
class ChildTable {
 public:
  RadixNode* find(LocalBlockHash key) const;
  const NodeRef* find_ref(LocalBlockHash key) const;
  void insert(LocalBlockHash key, NodeRef child);  // key must be absent
  NodeRef erase(LocalBlockHash key);
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<LocalBlockHash, NodeRef>>& entries() const { return entries_; }
  std::vector<std::pair<LocalBlockHash, NodeRef>> take_all();
  // Heap bytes of the table, as malloc chunks (memory_accounting.h).
  std::size_t chunk_bytes() const;

 private:
  static constexpr std::size_t kLinearLimit = 8;
  std::ptrdiff_t position(LocalBlockHash key) const;
  void rebuild_index();
  std::size_t home(LocalBlockHash key) const;
  std::size_t slot_of(LocalBlockHash key) const;  // the index slot naming `key` (present)
  void index_put(std::uint32_t position);

  std::vector<std::pair<LocalBlockHash, NodeRef>> entries_;
  // Used once size() > kLinearLimit: a power-of-two table of positions in entries_ plus one (0:
  // free), linear probing, at most half full. Empty otherwise.
  std::vector<std::uint32_t> index_;
  std::uint32_t index_shift_ = 64;  // 64 - log2(index_.size())
};

// Result of reading an edge against the start of a Stored chain under a shared lock.
struct StorePrefixScan {
  std::uint32_t matched = 0;  // leading blocks of the chain equal to the edge's leading blocks
  std::uint32_t edge_length = 0;
  std::uint64_t shape_version = 0;
};

enum class ParentEdgePlanAction : std::uint8_t {
  insert_from_parent,  // the parent is the edge's last block: new blocks go below this node
  continue_in_edge,    // the parent is inside the edge: new blocks are compared with its remainder
};

struct ParentEdgePlan {
  std::uint32_t parent_position = 0;
  std::uint64_t shape_version = 0;
  ParentEdgePlanAction action = ParentEdgePlanAction::insert_from_parent;
};

enum class ParentEdgeAction : std::uint8_t {
  insert_from_parent,  // plan still valid; `child` is the existing child for the first block, if any
  continue_in_edge,    // plan still valid; the caller compares blocks with the edge's remainder
  replan,              // the node changed shape (split, growth, detach) since the plan was made
  parent_not_held,     // the stream does not hold the parent block
};

struct ParentEdgeStep {
  ParentEdgeAction action = ParentEdgeAction::replan;
  NodeRef child;
};

class alignas(64) RadixNode {
 public:
  RadixNode(std::uint32_t start_depth, std::vector<EdgeBlock> edge)
      : start_depth_(start_depth), edge_fingerprint_(edge_fingerprint(edge, start_depth)), edge_(std::move(edge)) {}
  RadixNode(const RadixNode&) = delete;
  RadixNode& operator=(const RadixNode&) = delete;
  ~RadixNode() = default;

  // Depth of the edge's first block: fixed at construction (a split never moves it), so it is read
  // without the lock.
  std::uint32_t start_depth() const { return start_depth_; }

  // Reference to the child whose edge starts with `key`, or null.
  NodeRef child_snapshot(LocalBlockHash key) const;

  // Compares `blocks` with the edge from its first block (shared lock).
  StorePrefixScan scan_store_prefix(std::span<const StoredBlock> blocks) const;
  // Makes `slot` hold the whole edge if the node still has the shape seen at `shape_version`.
  // Returns the number of blocks newly held, or nullopt when the scan is stale and must be redone.
  std::optional<std::uint32_t> promote_to_full_with_version(WorkerSlot slot, std::uint64_t shape_version);

  // Where `parent` sits in this edge and what a continuation after it must do; nullopt if the
  // parent is not in this edge (it moved below through a split, or never was here). Matches the
  // edge's canonical names only (the reference's cursor API, driven by the ported tests); the
  // tree's store path resolves a parent through the storing stream's own names.
  std::optional<ParentEdgePlan> plan_store_parent_edge(ExternalSequenceBlockHash parent,
                                                       std::span<const StoredBlock> blocks) const;
  // Revalidates `plan` under the exclusive lock before the caller commits to it.
  ParentEdgeStep apply_store_parent_edge_plan(WorkerSlot slot, const ParentEdgePlan& plan,
                                              std::span<const StoredBlock> blocks);

 private:
  friend class NodeRef;
  friend class ConcurrentRadixTree;
  friend class RadixTreeTestPeer;  // reads the tree's shape for the tests (tests/support/radix_tree_test_peer.h)

  std::uint32_t end_depth() const { return start_depth_ + static_cast<std::uint32_t>(edge_.size()); }
  std::uint32_t edge_length() const { return static_cast<std::uint32_t>(edge_.size()); }
  // The external hash `slot` gave the block at `position` (caller holds the lock).
  ExternalSequenceBlockHash name_of(WorkerSlot slot, std::uint32_t position) const {
    return names_.name(slot, position, edge_);
  }
  // Sets the blocks `slot` holds (0: none) and returns the previous count. Every change of coverage
  // goes through here: a slot's names never outlive the blocks it holds (edge_names.h).
  std::uint32_t set_coverage(WorkerSlot slot, std::uint32_t count) {
    const std::uint32_t previous = coverage_.set(slot, count);
    if (count < previous && !names_.empty()) names_.truncate(slot, count);
    return previous;
  }
  ParentEdgeStep parent_edge_step_locked(WorkerSlot slot, std::uint32_t parent_position,
                                         std::span<const StoredBlock> blocks) const;

  // NOTE: the members find_matches reads on every node (lock, fingerprint, edge, coverage, the
  // child table's vectors) come first. With the node's 64-byte alignment the node is four cache
  // lines (256 bytes): the lock, fingerprint, edge and the coverage's count and array pointer in
  // the first, up to 11 coverage entries inline in the next two, the child table after them. A
  // query prefetches all four lines of the next node together (tree_match.cpp), so they arrive in
  // one round trip; a coverage array of its own would be a second miss after the node's.
  mutable std::atomic<std::uint32_t> refs_{0};
  mutable NodeLock mutex_;
  const std::uint32_t start_depth_;  // depth of the edge's first block; a split never moves it

  // Everything below is guarded by mutex_.
  // Sum of the edge's fingerprint terms (edge_fingerprint.h). Every change of edge_ updates it:
  // the constructor, in-place growth and split (tree_store.cpp), merge (tree_merge.cpp), and
  // freeing the edge (tree_merge.cpp, tree_cleanup.cpp: 0, the sum of no terms).
  std::uint64_t edge_fingerprint_;
  std::vector<EdgeBlock> edge_;
  EdgeCoverage coverage_;
  ChildTable children_;
  HolderNames names_;  // holders' own external hashes where they differ from edge_'s (edge_names.h)
  // The node that held the blocks right after this edge when it was last split. Lookups recorded
  // before a split follow it to find blocks that moved into the suffix.
  NodeRef continuation_;
  // Set (with detached_) when cleanup folded this node into its parent (tree_merge.cpp): its blocks
  // now sit in that node's edge at the same depths. Lookups recorded here follow it upward, taking
  // the parent's lock only after releasing this one. Only merged-away nodes point upward, so
  // references never form a cycle.
  NodeRef merged_into_;
  std::uint64_t shape_version_ = 0;  // bumped by split, in-place growth, child insert, merge and detach
  bool sealed_ = false;              // has had children: never grows in place again
  bool detached_ = false;            // cut out of the tree by cleanup, or merged into its parent
};

inline NodeRef::NodeRef(RadixNode* node) noexcept : node_(node) {
  if (node_ != nullptr) node_->refs_.fetch_add(1, std::memory_order_relaxed);
}

inline NodeRef::~NodeRef() {
  // NOTE: acq_rel so the deleting thread sees every write made under other references.
  if (node_ != nullptr && node_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete node_;
}

inline void NodeRef::acquire_many(RadixNode* node, std::uint32_t count) noexcept {
  node->refs_.fetch_add(count, std::memory_order_relaxed);
}

inline void NodeRef::release_many(RadixNode* node, std::uint32_t count) noexcept {
  // NOTE: acq_rel as in ~NodeRef.
  if (node->refs_.fetch_sub(count, std::memory_order_acq_rel) == count) delete node;
}

}  // namespace kvidx
