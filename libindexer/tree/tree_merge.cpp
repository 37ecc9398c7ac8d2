// ConcurrentRadixTree, merge: cleanup folds a node's only child back into the node when the split
// between them no longer separates anything (both held by exactly the same streams). Without it,
// every split point ever made under prefix churn would stay a node boundary for good. Locking
// rules and invariants: radix_tree.h.
#include "libindexer/tree/radix_tree.h"

#include <utility>
#include <vector>

namespace kvidx {

bool ConcurrentRadixTree::can_merge(const RadixNode& parent, const RadixNode& child) {
  if (parent.detached_ || child.detached_ || child.coverage_.empty() || parent.edge_.empty()) return false;
  const auto above = parent.coverage_.entries();
  const auto below = child.coverage_.entries();
  // NOTE: every holder of the parent is a full holder and also holds the child, and nobody else
  // holds the child. A stream in the child that is not a full holder of the parent is being
  // dropped top-down by a remover right now (prefix closure is restored once it reaches the
  // child): folding then would hide the child's part from it, so the merge waits for a later
  // cleanup. Requiring the same holders also keeps the merged edge free of new partial holders, so
  // a store diverging at the old boundary does not split it again at once.
  if (above.size() != below.size()) return false;
  const std::uint32_t length = parent.edge_length();
  for (std::size_t i = 0; i < above.size(); ++i) {
    if (above[i].slot != below[i].slot || above[i].covered != length) return false;
  }
  return true;
}

std::size_t ConcurrentRadixTree::merge_only_children_locked(const NodeRef& parent_ref) {
  RadixNode& parent = *parent_ref;
  std::size_t merged = 0;
  while (parent.children_.size() == 1 && parent_ref != root_) {
    NodeRef child_ref = parent.children_.entries().front().second;
    ExclusiveLock child_lock(child_ref->mutex_);  // NOTE: parent before child: top-down order
    RadixNode& child = *child_ref;
    if (!can_merge(parent, child)) break;

    const std::uint32_t offset = parent.edge_length();  // the child starts at the parent's end depth
    parent.children_.erase(child.edge_.front().local);
    parent.edge_.reserve(offset + child.edge_.size());  // exactly: no growth slack on a joined edge
    parent.edge_.insert(parent.edge_.end(), child.edge_.begin(), child.edge_.end());
    parent.edge_fingerprint_ += child.edge_fingerprint_;  // same depths: the child starts at offset
    for (const auto& entry : child.coverage_.entries()) parent.set_coverage(entry.slot, offset + entry.covered);
    parent.names_.append(std::move(child.names_), offset, parent.edge_);
    parent.children_ = std::move(child.children_);
    // The child's continuation is a child of the child, now of the parent: lookups recorded at the
    // parent before the child existed still lead to blocks that moved below.
    parent.continuation_ = std::move(child.continuation_);
    ++parent.shape_version_;  // stays sealed: an internal node never grows in place again

    child.children_ = ChildTable{};
    child.coverage_.clear();
    child.names_.clear();
    std::vector<EdgeBlock>().swap(child.edge_);  // stale lookups may pin the node; free its edge
    child.edge_fingerprint_ = 0;
    child.detached_ = true;
    child.merged_into_ = parent_ref;
    ++child.shape_version_;
    node_count_.fetch_sub(1, std::memory_order_relaxed);
    ++merged;
  }
  return merged;
}

}  // namespace kvidx
