// ConcurrentRadixTree, cleanup: when dead blocks pile up (or on an interval), detach the nodes no
// stream holds and dismantle their subtrees, then fold a node left with one child into it where
// that changes nothing observable (tree_merge.cpp). Locking rules and invariants: radix_tree.h.
#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace kvidx {

std::int64_t ConcurrentRadixTree::steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ConcurrentRadixTree::try_schedule_cleanup() {
  if (cleanup_scheduled_.load(std::memory_order_relaxed)) return false;
  const std::size_t dead = dead_blocks_estimate_.load(std::memory_order_relaxed);
  if (dead == 0) return false;
  const std::size_t attached = attached_blocks_.load(std::memory_order_relaxed);
  const std::size_t live = attached - std::min(dead, attached);
  bool due = dead >= kMinDeadBlocks && dead >= live / 8;
  if (!due) {
    const auto interval_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(kCleanupInterval).count();
    due = steady_now_ns() - last_cleanup_ns_.load(std::memory_order_relaxed) >= interval_ns;
  }
  if (!due) return false;
  bool expected = false;
  return cleanup_scheduled_.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
}

CleanupStats ConcurrentRadixTree::run_cleanup() {
  CleanupStats stats;
  // Reset first: coverage lost while the walk runs is counted for the next round.
  dead_blocks_estimate_.store(0, std::memory_order_relaxed);
  std::vector<NodeRef> stack{root_};
  std::vector<NodeRef> live;
  std::vector<NodeRef> dead;
  while (!stack.empty()) {
    NodeRef parent = std::move(stack.back());
    stack.pop_back();
    live.clear();
    dead.clear();
    bool merge_candidate = false;
    {
      // Shared pass: find candidates without excluding readers.
      SharedLock parent_lock(parent->mutex_);
      if (parent->detached_) continue;
      for (const auto& [key, child] : parent->children_.entries()) {
        SharedLock child_lock(child->mutex_);
        (child->coverage_.empty() ? dead : live).push_back(child);
      }
      // An only child left by an earlier round whose merge had to wait (a dump, a remover).
      if (parent != root_ && live.size() == 1 && dead.empty()) {
        SharedLock child_lock(live.front()->mutex_);
        merge_candidate = can_merge(*parent, *live.front());
      }
    }
    // Left with one live child: the split between them may no longer separate anything.
    merge_candidate = merge_candidate || (parent != root_ && !dead.empty() && live.size() <= 1);
    if (!dead.empty() || merge_candidate) {
      std::vector<NodeRef> detached;
      {
        // NOTE: try-locked, before any node lock: a merge never waits for a dump (merge_gate_).
        std::unique_lock gate(merge_gate_, std::defer_lock);
        if (merge_candidate) (void)gate.try_lock();
        ExclusiveLock parent_lock(parent->mutex_);
        detach_dead_children_locked(*parent, dead, detached);
        if (gate.owns_lock() && !parent->detached_) {
          while (const std::size_t merged = merge_only_children_locked(parent)) {
            stats.nodes_merged += merged;
            // The merged child's children are the parent's now; some may be dead already, and
            // once they go the parent may have an only child again.
            dead.clear();
            for (const auto& [key, child] : parent->children_.entries()) dead.push_back(child);
            if (detach_dead_children_locked(*parent, dead, detached) == 0) break;
          }
          // Visit the parent's current children next (a merge replaced them).
          live.clear();
          for (const auto& [key, child] : parent->children_.entries()) live.push_back(child);
        }
      }
      for (auto& subtree : detached) dismantle(std::move(subtree), stats);
    }
    for (auto& child : live) stack.push_back(std::move(child));
  }
  last_cleanup_ns_.store(steady_now_ns(), std::memory_order_relaxed);
  cleanup_scheduled_.store(false, std::memory_order_release);
  return stats;
}

std::size_t ConcurrentRadixTree::detach_dead_children_locked(RadixNode& parent, const std::vector<NodeRef>& candidates,
                                                             std::vector<NodeRef>& detached) {
  std::size_t count = 0;
  for (const auto& candidate : candidates) {
    ExclusiveLock child_lock(candidate->mutex_);  // NOTE: parent before child: top-down order
    // NOTE: re-checked under both locks: a store may have revived it since the shared pass.
    if (!candidate->coverage_.empty() || candidate->detached_) continue;
    const RadixNode* current = parent.children_.find(candidate->edge_.front().local);
    if (current != candidate.get()) continue;
    parent.children_.erase(candidate->edge_.front().local);
    if (parent.continuation_ == candidate) parent.continuation_ = NodeRef{};
    ++parent.shape_version_;
    // Marked here, under the parent's lock, so no lookup-guided writer can use it afterwards.
    candidate->detached_ = true;
    ++candidate->shape_version_;
    detached.push_back(candidate);
    ++count;
  }
  return count;
}

void ConcurrentRadixTree::dismantle(NodeRef subtree_root, CleanupStats& stats) {
  std::vector<NodeRef> stack;
  stack.push_back(std::move(subtree_root));
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    ExclusiveLock lock(node->mutex_);
    node->detached_ = true;
    ++node->shape_version_;
    // A remover may still be walking down to these nodes; its coverage is dropped here so the
    // per-stream counts stay exact, and it will find nothing left to drop.
    for (const auto& entry : node->coverage_.entries()) {
      registry_.add_blocks(entry.slot, -static_cast<std::int64_t>(entry.covered));
    }
    node->coverage_.clear();
    node->names_.clear();
    ++stats.nodes_removed;
    stats.blocks_removed += node->edge_.size();
    node_count_.fetch_sub(1, std::memory_order_relaxed);
    attached_blocks_.fetch_sub(node->edge_.size(), std::memory_order_relaxed);
    std::vector<EdgeBlock>().swap(node->edge_);  // stale lookups may pin the node; free its edge
    node->edge_fingerprint_ = 0;
    node->continuation_ = NodeRef{};
    for (auto& [key, child] : node->children_.take_all()) stack.push_back(std::move(child));
  }
}

}  // namespace kvidx
