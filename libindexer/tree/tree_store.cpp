// ConcurrentRadixTree, store path: a Stored event's chain is found below its parent (or the root),
// matched against the edges it runs along, and added as coverage, in-place growth, a split or a new
// child. Locking rules and invariants: radix_tree.h.
#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvidx {

ApplyResult ConcurrentRadixTree::apply_stored(WorkerLookup& lookup, WorkerSlot slot, const KvCacheStoreData& data) {
  lookup.prefetch(data.blocks);  // the buckets the blocks' entries go into, loaded during the walk
  if (!data.parent_hash) return store_from_root(lookup, slot, data.blocks);
  const LookupEntry* entry = lookup.find(*data.parent_hash);
  // NOTE: a rejected Stored changes nothing, not even the lookup: a dropped mark or stale entry of
  // the parent stays, so a later Removed naming it counts as it would have without this event.
  if (entry == nullptr) {
    return {ApplyStatus::parent_not_found, "parent block " + std::to_string(data.parent_hash->value) + " unknown"};
  }
  // NOTE: copied because storing may rehash the lookup and move the entry.
  const LookupEntry parent_entry = *entry;
  return store_after(lookup, slot, parent_entry, *data.parent_hash, data.blocks, parent_entry.node);
}

ApplyResult ConcurrentRadixTree::store_after(WorkerLookup& lookup, WorkerSlot slot, const LookupEntry& parent_entry,
                                             ExternalSequenceBlockHash parent, std::span<const StoredBlock> blocks,
                                             const NodeRef& start) {
  std::optional<LockedBlock> held = locate_held_block(slot, start, parent, parent_entry.depth);
  if (!held && start != parent_entry.node)
    held = locate_held_block(slot, parent_entry.node, parent, parent_entry.depth);
  if (!held) {
    // The entry outlived the block (cut below a removed ancestor). It stays until the stream names
    // the block in a Removed or clears: a rejected Stored changes nothing.
    return {ApplyStatus::parent_not_found, "parent block " + std::to_string(parent.value) + " not held"};
  }
  if (held->node != parent_entry.node) lookup.insert_or_assign(parent, held->node, parent_entry.depth);
  const std::uint32_t offset = held->position + 1;
  extend_from(lookup, slot, std::move(held->node), std::move(held->lock), offset, blocks);
  return ApplyResult::success();
}

ApplyResult ConcurrentRadixTree::store_from_root(WorkerLookup& lookup, WorkerSlot slot,
                                                 std::span<const StoredBlock> blocks) {
  RadixNode& root = *root_;
  {
    // Fast path: the first block already has a root child; descend without excluding readers.
    SharedLock root_lock(root.mutex_);
    if (const NodeRef* child = root.children_.find_ref(blocks.front().tokens_hash)) {
      NodeRef next = *child;
      ExclusiveLock next_lock(next->mutex_);  // NOTE: locked before the root lock is released
      root_lock.unlock();
      extend_from(lookup, slot, std::move(next), std::move(next_lock), 0, blocks);
      return ApplyResult::success();
    }
  }
  // extend_from re-checks the children under the exclusive lock: another lane may have won.
  extend_from(lookup, slot, root_, ExclusiveLock(root.mutex_), 0, blocks);
  return ApplyResult::success();
}

void ConcurrentRadixTree::extend_from(WorkerLookup& lookup, WorkerSlot slot, NodeRef node, ExclusiveLock lock,
                                      std::uint32_t offset, std::span<const StoredBlock> blocks) {
  while (true) {
    RadixNode& n = *node;
    const bool is_root = node == root_;
    const std::uint32_t length = n.edge_length();
    std::uint32_t matched = 0;
    // NOTE: one bound, computed once (offset <= length: a held block's position plus one).
    const std::size_t limit = std::min<std::size_t>(length - offset, blocks.size());
    const EdgeBlock* const edge = n.edge_.data() + offset;
    while (matched < limit && edge[matched].local == blocks[matched].tokens_hash) ++matched;
    if (!is_root && matched + offset > 0) {
      const std::uint32_t reach = offset + matched;
      const std::uint32_t before = n.coverage_.covered(slot);
      if (reach > before) {
        n.set_coverage(slot, reach);
        registry_.add_blocks(slot, reach - before);
      }
      for (std::uint32_t i = 0; i < matched; ++i) {
        // The stream's own name for the block, kept only when it differs from the edge's.
        n.names_.set(slot, offset + i, blocks[i].block_hash, n.edge_);
      }
      lookup.insert_run(blocks.first(matched), node, n.start_depth_ + offset);
    }
    blocks = blocks.subspan(matched);
    if (blocks.empty()) return;
    if (offset + matched < length) split_locked(n, offset + matched);

    // The stream now holds this whole edge and the chain continues below its tail.
    if (const NodeRef* child = n.children_.find_ref(blocks.front().tokens_hash)) {
      NodeRef next = *child;
      ExclusiveLock next_lock(next->mutex_);
      // NOTE: the parent is released only after the child is locked, so cleanup (which needs
      // both) cannot detach the child in between.
      lock = std::move(next_lock);
      node = std::move(next);
      offset = 0;
      continue;
    }
    if (!n.sealed_ && !is_root) {
      // Decode-style growth: a never-internal edge grows in place; holders of the old tail become
      // partial holders automatically because coverage is a count of leading blocks.
      const std::uint32_t start = n.edge_length();
      for (const auto& block : blocks) {
        n.edge_fingerprint_ += fingerprint_term(block.tokens_hash, n.end_depth());
        n.edge_.push_back(EdgeBlock{block.tokens_hash, block.block_hash});
      }
      // The new blocks are named by this stream (canonical). Nobody else held past the old tail.
      n.set_coverage(slot, n.edge_length());
      registry_.add_blocks(slot, static_cast<std::int64_t>(blocks.size()));
      attached_blocks_.fetch_add(blocks.size(), std::memory_order_relaxed);
      ++n.shape_version_;
      lookup.insert_run(blocks, node, n.start_depth_ + start);
      return;
    }
    NodeRef child = new_child_locked(n, slot, blocks);
    lookup.insert_run(blocks, child, child->start_depth_);
    return;
  }
}

void ConcurrentRadixTree::split_locked(RadixNode& node, std::uint32_t keep) {
  std::vector<EdgeBlock> tail(node.edge_.begin() + keep, node.edge_.end());
  node.edge_.resize(keep);
  NodeRef suffix(new RadixNode(node.start_depth_ + keep, std::move(tail)));
  node.edge_fingerprint_ -= suffix->edge_fingerprint_;
  // The suffix is invisible until node's lock is released, so it is filled without its own lock.
  suffix->coverage_ = node.coverage_.split_off(keep);
  suffix->names_ = node.names_.split_off(keep);
  suffix->children_ = std::move(node.children_);
  suffix->sealed_ = node.sealed_;
  suffix->continuation_ = std::move(node.continuation_);
  node.children_ = ChildTable{};
  node.children_.insert(suffix->edge_.front().local, suffix);
  node.continuation_ = suffix;
  node.sealed_ = true;
  ++node.shape_version_;
  node_count_.fetch_add(1, std::memory_order_relaxed);
  if (suffix->coverage_.empty() && !node.coverage_.empty()) note_coverage_lost(*suffix);
}

NodeRef ConcurrentRadixTree::new_child_locked(RadixNode& parent, WorkerSlot slot, std::span<const StoredBlock> blocks) {
  std::vector<EdgeBlock> edge;
  edge.reserve(blocks.size());
  for (const auto& block : blocks) edge.push_back(EdgeBlock{block.tokens_hash, block.block_hash});
  NodeRef child(new RadixNode(parent.end_depth(), std::move(edge)));
  child->set_coverage(slot, child->edge_length());
  registry_.add_blocks(slot, static_cast<std::int64_t>(blocks.size()));
  parent.children_.insert(blocks.front().tokens_hash, child);
  parent.sealed_ = true;
  ++parent.shape_version_;
  node_count_.fetch_add(1, std::memory_order_relaxed);
  attached_blocks_.fetch_add(blocks.size(), std::memory_order_relaxed);
  return child;
}

}  // namespace kvidx
