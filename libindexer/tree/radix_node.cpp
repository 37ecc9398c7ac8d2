#include "libindexer/tree/radix_node.h"

#include <algorithm>
#include <mutex>

#include "libindexer/tree/memory_accounting.h"

namespace kvidx {

std::ptrdiff_t ChildTable::position(LocalBlockHash key) const {
  if (entries_.size() > kLinearLimit) {
    auto it = index_.find(key);
    return it == index_.end() ? -1 : static_cast<std::ptrdiff_t>(it->second);
  }
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].first == key) return static_cast<std::ptrdiff_t>(i);
  }
  return -1;
}

RadixNode* ChildTable::find(LocalBlockHash key) const {
  const auto i = position(key);
  return i < 0 ? nullptr : entries_[static_cast<std::size_t>(i)].second.get();
}

const NodeRef* ChildTable::find_ref(LocalBlockHash key) const {
  const auto i = position(key);
  return i < 0 ? nullptr : &entries_[static_cast<std::size_t>(i)].second;
}

void ChildTable::rebuild_index() {
  index_.clear();
  if (entries_.size() <= kLinearLimit) return;
  index_.reserve(entries_.size() * 2);
  for (std::size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, static_cast<std::uint32_t>(i));
}

void ChildTable::insert(LocalBlockHash key, NodeRef child) {
  entries_.emplace_back(key, std::move(child));
  if (entries_.size() == kLinearLimit + 1) {
    rebuild_index();
  } else if (entries_.size() > kLinearLimit) {
    index_.emplace(key, static_cast<std::uint32_t>(entries_.size() - 1));
  }
}

NodeRef ChildTable::erase(LocalBlockHash key) {
  const auto i = position(key);
  if (i < 0) return {};
  const auto at = static_cast<std::size_t>(i);
  NodeRef removed = std::move(entries_[at].second);
  const bool indexed = entries_.size() > kLinearLimit;
  if (indexed) index_.erase(key);
  if (at + 1 != entries_.size()) {
    entries_[at] = std::move(entries_.back());
    if (indexed) index_[entries_[at].first] = static_cast<std::uint32_t>(at);
  }
  entries_.pop_back();
  if (indexed && entries_.size() <= kLinearLimit) index_.clear();
  return removed;
}

std::size_t ChildTable::chunk_bytes() const {
  return malloc_chunk_bytes(entries_.capacity() * sizeof(entries_[0])) +
         (index_.empty() ? 0
                         : hash_table_chunk_bytes(index_.size(), index_.bucket_count(),
                                                  sizeof(std::pair<LocalBlockHash, std::uint32_t>)));
}

std::vector<std::pair<LocalBlockHash, NodeRef>> ChildTable::take_all() {
  index_.clear();
  return std::exchange(entries_, {});
}

NodeRef RadixNode::child_snapshot(LocalBlockHash key) const {
  std::shared_lock lock(mutex_);
  const NodeRef* child = children_.find_ref(key);
  return child ? *child : NodeRef{};
}

StorePrefixScan RadixNode::scan_store_prefix(std::span<const StoredBlock> blocks) const {
  std::shared_lock lock(mutex_);
  StorePrefixScan scan;
  scan.edge_length = edge_length();
  scan.shape_version = shape_version_;
  while (scan.matched < scan.edge_length && scan.matched < blocks.size() &&
         edge_[scan.matched].local == blocks[scan.matched].tokens_hash) {
    ++scan.matched;
  }
  return scan;
}

std::optional<std::uint32_t> RadixNode::promote_to_full_with_version(WorkerSlot slot, std::uint64_t shape_version) {
  std::unique_lock lock(mutex_);
  if (detached_ || shape_version_ != shape_version) return std::nullopt;
  const std::uint32_t previous = set_coverage(slot, edge_length());
  return edge_length() - previous;
}

std::optional<ParentEdgePlan> RadixNode::plan_store_parent_edge(ExternalSequenceBlockHash parent,
                                                                std::span<const StoredBlock> blocks) const {
  std::shared_lock lock(mutex_);
  (void)blocks;
  for (std::uint32_t i = 0; i < edge_.size(); ++i) {
    if (edge_[i].external == parent) {
      const bool at_tail = i + 1 == edge_.size();
      return ParentEdgePlan{
          i, shape_version_,
          at_tail ? ParentEdgePlanAction::insert_from_parent : ParentEdgePlanAction::continue_in_edge};
    }
  }
  return std::nullopt;
}

ParentEdgeStep RadixNode::parent_edge_step_locked(WorkerSlot slot, std::uint32_t parent_position,
                                                  std::span<const StoredBlock> blocks) const {
  if (detached_ || parent_position >= edge_.size()) return {ParentEdgeAction::replan, {}};
  if (coverage_.covered(slot) <= parent_position) return {ParentEdgeAction::parent_not_held, {}};
  if (parent_position + 1 < edge_.size()) return {ParentEdgeAction::continue_in_edge, {}};
  if (blocks.empty()) return {ParentEdgeAction::insert_from_parent, {}};
  const NodeRef* child = children_.find_ref(blocks.front().tokens_hash);
  return {ParentEdgeAction::insert_from_parent, child ? *child : NodeRef{}};
}

ParentEdgeStep RadixNode::apply_store_parent_edge_plan(WorkerSlot slot, const ParentEdgePlan& plan,
                                                       std::span<const StoredBlock> blocks) {
  std::unique_lock lock(mutex_);
  if (shape_version_ != plan.shape_version) return {ParentEdgeAction::replan, {}};
  return parent_edge_step_locked(slot, plan.parent_position, blocks);
}

}  // namespace kvidx
