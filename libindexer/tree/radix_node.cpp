#include "libindexer/tree/radix_node.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "libindexer/tree/linear_probing.h"
#include "libindexer/tree/memory_accounting.h"

namespace kvidx {

// The layout find_matches relies on (radix_node.h): four cache lines, prefetched together.
static_assert(sizeof(RadixNode) == 256 && alignof(RadixNode) == 64);

std::size_t ChildTable::home(LocalBlockHash key) const {
  // Fibonacci hashing: local hashes from tests and some engines are small or sequential numbers.
  return static_cast<std::size_t>((key.value * 0x9E3779B97F4A7C15ULL) >> index_shift_);
}

std::ptrdiff_t ChildTable::position(LocalBlockHash key) const {
  if (!index_.empty()) {
    const std::size_t mask = index_.size() - 1;
    for (std::size_t i = home(key);; i = (i + 1) & mask) {
      const std::uint32_t slot = index_[i];
      if (slot == 0) return -1;
      if (entries_[slot - 1].first == key) return static_cast<std::ptrdiff_t>(slot - 1);
    }
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

void ChildTable::index_put(std::uint32_t position) {
  const std::size_t mask = index_.size() - 1;
  std::size_t i = home(entries_[position].first);
  while (index_[i] != 0) i = (i + 1) & mask;
  index_[i] = position + 1;
}

std::size_t ChildTable::slot_of(LocalBlockHash key) const {
  const std::size_t mask = index_.size() - 1;
  std::size_t i = home(key);
  while (entries_[index_[i] - 1].first != key) i = (i + 1) & mask;  // NOTE: key present: never a free slot
  return i;
}

void ChildTable::rebuild_index() {
  index_.clear();
  if (entries_.size() <= kLinearLimit) {
    index_.shrink_to_fit();
    return;
  }
  // At most a quarter full after a rebuild, so it grows again only at half (see insert).
  std::size_t size = 16;
  std::uint32_t bits = 4;
  while (size < entries_.size() * 4) {
    size *= 2;
    ++bits;
  }
  index_.assign(size, 0);
  index_shift_ = 64 - bits;
  for (std::size_t i = 0; i < entries_.size(); ++i) index_put(static_cast<std::uint32_t>(i));
}

void ChildTable::insert(LocalBlockHash key, NodeRef child) {
  entries_.emplace_back(key, std::move(child));
  if (entries_.size() <= kLinearLimit) return;
  if (index_.empty() || entries_.size() * 2 > index_.size()) {
    rebuild_index();
  } else {
    index_put(static_cast<std::uint32_t>(entries_.size() - 1));
  }
}

NodeRef ChildTable::erase(LocalBlockHash key) {
  const auto i = position(key);
  if (i < 0) return {};
  const auto at = static_cast<std::size_t>(i);
  NodeRef removed = std::move(entries_[at].second);
  if (!index_.empty()) {
    const std::size_t hole = slot_of(key);
    index_[hole] = 0;
    backward_shift_after_erase(
        hole, index_.size() - 1, [&](std::size_t j) { return index_[j] == 0; },
        [&](std::size_t j) { return home(entries_[index_[j] - 1].first); },
        [&](std::size_t from, std::size_t to) {
          index_[to] = index_[from];
          index_[from] = 0;
        });
  }
  const std::size_t last = entries_.size() - 1;
  if (at != last) {
    // The last entry fills the gap; its slot follows it.
    if (!index_.empty()) index_[slot_of(entries_[last].first)] = static_cast<std::uint32_t>(at + 1);
    entries_[at] = std::move(entries_[last]);
  }
  entries_.pop_back();
  if (!index_.empty() && entries_.size() <= kLinearLimit) rebuild_index();
  return removed;
}

std::size_t ChildTable::chunk_bytes() const {
  return malloc_chunk_bytes(entries_.capacity() * sizeof(entries_[0])) +
         malloc_chunk_bytes(index_.capacity() * sizeof(std::uint32_t));
}

std::vector<std::pair<LocalBlockHash, NodeRef>> ChildTable::take_all() {
  index_ = {};
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
