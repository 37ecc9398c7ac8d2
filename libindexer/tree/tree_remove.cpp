// ConcurrentRadixTree, remove path: Removed events cut a stream's coverage at the removed block and
// drop it from everything below; clears, stream removal and worker sweeps drop whole streams.
// A node whose last full holder leaves has its children (unreachable by prefix closure) detached at
// once; other nodes left without holders stay attached for cleanup (tree_cleanup.cpp). Locking
// rules and invariants: radix_tree.h.
#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvidx {

namespace {

// A block of a Removed event, located before any cut is made.
struct RemovalTarget {
  NodeRef node;
  ExternalSequenceBlockHash hash;
  std::uint32_t depth = 0;
};

}  // namespace

ApplyResult ConcurrentRadixTree::apply_removed(WorkerLookup& lookup, WorkerSlot slot,
                                               std::span<const ExternalSequenceBlockHash> hashes, const NodeRef& hint) {
  lookup.prefetch(hashes);
  std::vector<RemovalTarget> targets;
  targets.reserve(hashes.size());
  std::size_t unknown = 0;
  // The node of the last target, still locked: a Removed usually names a run of blocks of one
  // edge, which are then checked under one lock and make one target (its shallowest block).
  std::optional<LockedBlock> current;
  for (const auto hash : hashes) {
    // NOTE: no reference taken; the lookup's own keeps the node alive (nothing erases before pass 2).
    const auto recorded = lookup.peek(hash);
    if (!recorded) {
      // NOTE: a block an earlier cut dropped counts as known whether that cut scrubbed its entry
      // (dropped mark) or left it stale (below): which one depends on other streams' splits, the
      // result must not (WorkerLookup).
      if (!lookup.was_dropped(hash)) ++unknown;
      continue;
    }
    if (!hint && current && current->node.get() == recorded->node) {
      const RadixNode& n = *current->node;
      // Locked since it was located, so not detached; a depth inside the edge is decided here
      // exactly as locate_held_block would (outside it, the block moved below: the slow path).
      if (recorded->depth >= n.start_depth_ && recorded->depth < n.end_depth()) {
        const std::uint32_t position = recorded->depth - n.start_depth_;
        if (n.coverage_.covered(slot) > position && n.name_of(slot, position) == hash &&
            recorded->depth < targets.back().depth) {
          targets.back().hash = hash;
          targets.back().depth = recorded->depth;
        }
        continue;
      }
    }
    current.reset();  // NOTE: released before locating elsewhere: one node lock at a time here
    NodeRef start(recorded->node);
    if (hint && hint != start) current = locate_held_block(slot, hint, hash, recorded->depth);
    if (!current) current = locate_held_block(slot, std::move(start), hash, recorded->depth);
    if (!current) continue;  // no longer held (cut below an earlier removal): the entry is scrubbed below
    targets.push_back(RemovalTarget{current->node, hash, recorded->depth});
  }
  current.reset();
  // The event's own blocks leave the lookup first (entry and mark): the cuts below then scrub, and
  // mark as dropped, only the blocks the event did not name. The targets keep their nodes alive.
  lookup.forget_all(hashes);
  // NOTE: deepest first. Cutting a suffix scrubs the lookup entries of its own edge while the
  // stream still holds it; the later, shallower cut then drops what remains below. Within one node
  // the shallowest position wins, so the result is the cut at the minimum position whatever the
  // order of the hashes in the event (the loop above keeps only that one for a run in one node).
  std::sort(targets.begin(), targets.end(),
            [](const RemovalTarget& a, const RemovalTarget& b) { return a.depth > b.depth; });
  for (auto& target : targets) {
    std::optional<LockedBlock> held = locate_held_block(slot, std::move(target.node), target.hash, target.depth);
    if (held) cut_locked(&lookup, slot, *held);
  }
  if (unknown > 0) {
    return {ApplyStatus::block_not_found,
            std::to_string(unknown) + " of " + std::to_string(hashes.size()) + " removed blocks unknown"};
  }
  return ApplyResult::success();
}

namespace {

// Whether some stream holds the whole edge (only a full holder can hold anything below it).
bool has_full_holder(std::uint32_t edge_length, std::span<const CoverageEntry> coverage) {
  return std::any_of(coverage.begin(), coverage.end(),
                     [&](const CoverageEntry& entry) { return entry.covered == edge_length; });
}

}  // namespace

std::vector<NodeRef> ConcurrentRadixTree::detach_children_locked(RadixNode& node) {
  std::vector<NodeRef> detached;
  if (node.children_.empty()) return detached;
  detached.reserve(node.children_.size());
  for (auto& [key, child] : node.children_.take_all()) {
    ExclusiveLock child_lock(child->mutex_);  // NOTE: parent before child: top-down order
    if (child->detached_) continue;
    // Marked under the parent's lock, as cleanup does: no lookup-guided writer uses it afterwards.
    child->detached_ = true;
    ++child->shape_version_;
    detached.push_back(std::move(child));
  }
  node.continuation_ = NodeRef{};
  ++node.shape_version_;  // stays sealed: an internal node never grows in place again
  return detached;
}

void ConcurrentRadixTree::dismantle_all(std::vector<NodeRef> subtrees) {
  CleanupStats unused;
  for (auto& subtree : subtrees) dismantle(std::move(subtree), unused);
}

void ConcurrentRadixTree::cut_locked(WorkerLookup* lookup, WorkerSlot slot, LockedBlock& at) {
  RadixNode& n = *at.node;
  const std::uint32_t position = at.position;
  const std::uint32_t before = n.coverage_.covered(slot);
  if (before <= position) return;
  if (lookup != nullptr) {
    // NOTE: before the coverage shrinks: the names of the blocks it drops go with it. The
    // buckets are fetched together first (each is a cache miss of its own).
    for (std::uint32_t i = position; i < before && i < position + WorkerLookup::kPrefetchLimit; ++i) {
      lookup->prefetch(n.name_of(slot, i));
    }
    for (std::uint32_t i = position; i < before; ++i) lookup->scrub_dropped(n.name_of(slot, i));
  }
  n.set_coverage(slot, position);
  registry_.add_blocks(slot, -static_cast<std::int64_t>(before - position));
  if (n.coverage_.empty()) note_coverage_lost(n);
  if (before < n.edge_length()) return;  // a partial holder holds nothing below (prefix closure)
  if (!has_full_holder(n.edge_length(), n.coverage_.entries())) {
    // The last full holder left: by prefix closure nobody can hold anything below any more, so the
    // children go now (as the reference does), not at the next cleanup.
    std::vector<NodeRef> unreachable = detach_children_locked(n);
    at.lock.unlock();
    dismantle_all(std::move(unreachable));
    return;
  }
  std::vector<NodeRef> below;
  below.reserve(n.children_.size());
  for (const auto& [key, child] : n.children_.entries()) below.push_back(child);
  at.lock.unlock();
  drop_from_subtrees(slot, std::move(below));
}

void ConcurrentRadixTree::drop_from_subtrees(WorkerSlot slot, std::vector<NodeRef> stack) {
  // Lookup entries of these blocks are left in place: they are stale and get scrubbed when the
  // stream names them in a Removed or clears.
  std::vector<NodeRef> unreachable;
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    ExclusiveLock lock(node->mutex_);
    const std::uint32_t had = node->set_coverage(slot, 0);
    if (had == 0) continue;
    registry_.add_blocks(slot, -static_cast<std::int64_t>(had));
    if (node->coverage_.empty()) note_coverage_lost(*node);
    if (had != node->edge_length()) continue;
    if (!has_full_holder(node->edge_length(), node->coverage_.entries())) {
      for (auto& child : detach_children_locked(*node)) unreachable.push_back(std::move(child));
      continue;
    }
    for (const auto& [key, child] : node->children_.entries()) stack.push_back(child);
  }
  dismantle_all(std::move(unreachable));
}

void ConcurrentRadixTree::drop_stream(WorkerLookup& lookup, WorkerSlot slot) {
  // The lookup is emptied first (entries and marks); each node its entries led to comes back once.
  std::vector<NodeRef> nodes = lookup.take_nodes();
  for (auto& node : nodes) {
    ExclusiveLock lock(node->mutex_);
    while (node->detached_ && node->merged_into_) {
      // Folded into its parent: cut there (at its start: the whole stream goes anyway).
      NodeRef up = node->merged_into_;
      lock.unlock();  // NOTE: released before the parent is locked: nobody locks upward while holding
      lock = ExclusiveLock(up->mutex_);
      node = std::move(up);
    }
    if (node->detached_) continue;
    LockedBlock at{std::move(node), std::move(lock), 0};
    cut_locked(nullptr, slot, at);
  }
  // Every held block has an entry leading to it, so this is a safety net, not the common path.
  if (registry_.block_count(slot) != 0) sweep_slots({slot});
}

void ConcurrentRadixTree::sweep_slots(const std::vector<WorkerSlot>& slots) {
  std::vector<NodeRef> unreachable;
  std::vector<NodeRef> stack;
  {
    SharedLock root_lock(root_->mutex_);
    for (const auto& [key, child] : root_->children_.entries()) stack.push_back(child);
  }
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    ExclusiveLock lock(node->mutex_);
    bool held_fully = false;
    bool dropped = false;
    for (const WorkerSlot slot : slots) {
      const std::uint32_t had = node->set_coverage(slot, 0);
      if (had == 0) continue;
      dropped = true;
      registry_.add_blocks(slot, -static_cast<std::int64_t>(had));
      held_fully = held_fully || had == node->edge_length();
    }
    if (dropped && node->coverage_.empty()) note_coverage_lost(*node);
    if (!held_fully) continue;
    if (!has_full_holder(node->edge_length(), node->coverage_.entries())) {
      for (auto& child : detach_children_locked(*node)) unreachable.push_back(std::move(child));
      continue;
    }
    for (const auto& [key, child] : node->children_.entries()) stack.push_back(child);
  }
  dismantle_all(std::move(unreachable));
}

void ConcurrentRadixTree::remove_stream(DirectLookup& lookup, WorkerWithDpRank stream) {
  const auto slot = registry_.find(stream);
  auto it = lookup.find(stream);
  if (it != lookup.end()) {
    if (slot) drop_stream(it->second, *slot);
    lookup.erase(it);
  } else if (slot && registry_.block_count(*slot) != 0) {
    sweep_slots({*slot});
  }
}

void ConcurrentRadixTree::remove_worker_sweep(WorkerId worker_id) {
  std::vector<WorkerSlot> slots = registry_.slots_of_worker(worker_id);
  std::erase_if(slots, [&](WorkerSlot slot) { return registry_.block_count(slot) == 0; });
  if (!slots.empty()) sweep_slots(slots);
}

}  // namespace kvidx
