// ConcurrentRadixTree: construction and teardown, event dispatch (apply_event hands each event to
// the store, remove or clear path), the held-block locator the store and remove paths share, and
// the per-stream block counts. Locking rules and invariants: radix_tree.h.
#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvidx {

namespace {

std::string stream_text(WorkerWithDpRank stream) {
  return "worker " + std::to_string(stream.worker_id) + " rank " + std::to_string(stream.dp_rank);
}

}  // namespace

std::string_view to_string(ApplyStatus status) {
  switch (status) {
    case ApplyStatus::ok: return "ok";
    case ApplyStatus::parent_not_found: return "parent_not_found";
    case ApplyStatus::block_not_found: return "block_not_found";
    case ApplyStatus::invalid: return "invalid";
  }
  return "unknown";
}

ConcurrentRadixTree::ConcurrentRadixTree() : root_(new RadixNode(0, {})), last_cleanup_ns_(steady_now_ns()) {
  // The root has no edge; it only ever gets children.
  root_->sealed_ = true;
}

ConcurrentRadixTree::~ConcurrentRadixTree() {
  // NOTE: dismantled iteratively so a deep tree cannot overflow the stack through nested
  // NodeRef destructors. Nodes still referenced by callers' lookups survive, childless.
  std::vector<NodeRef> stack;
  stack.push_back(root_);
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    ExclusiveLock lock(node->mutex_);
    node->detached_ = true;
    node->continuation_ = NodeRef{};
    for (auto& [key, child] : node->children_.take_all()) stack.push_back(std::move(child));
  }
}

WorkerLookup* ConcurrentRadixTree::lookup_for(DirectLookup& lookup, WorkerWithDpRank stream, ApplyResult& failure) {
  WorkerLookup& worker_lookup = lookup[stream];
  if (!worker_lookup.slot) {
    worker_lookup.slot = registry_.slot_for(stream);
    if (!worker_lookup.slot) {
      failure = {ApplyStatus::invalid, "worker slot capacity exhausted for " + stream_text(stream)};
      return nullptr;
    }
  }
  return &worker_lookup;
}

ApplyResult ConcurrentRadixTree::apply_event(DirectLookup& lookup, const RouterEvent& event) {
  const WorkerWithDpRank stream = event.stream();
  ApplyResult failure;
  switch (kind_of(event.event.data)) {
    case EventKind::stored: {
      const auto& data = std::get<KvCacheStoreData>(event.event.data);
      if (data.blocks.empty()) return {ApplyStatus::invalid, "stored event without blocks from " + stream_text(stream)};
      WorkerLookup* worker_lookup = lookup_for(lookup, stream, failure);
      if (worker_lookup == nullptr) return failure;
      ApplyResult result = apply_stored(*worker_lookup, *worker_lookup->slot, data);
      if (!result.ok()) result.error += " (" + stream_text(stream) + ")";
      return result;
    }
    case EventKind::removed: {
      const auto& data = std::get<KvCacheRemoveData>(event.event.data);
      WorkerLookup* worker_lookup = lookup_for(lookup, stream, failure);
      if (worker_lookup == nullptr) return failure;
      ApplyResult result = apply_removed(*worker_lookup, *worker_lookup->slot, data.block_hashes, NodeRef{});
      if (!result.ok()) result.error += " (" + stream_text(stream) + ")";
      return result;
    }
    case EventKind::cleared: {
      auto it = lookup.find(stream);
      if (it == lookup.end()) {
        // Never seen by this lane: nothing of it can be in the tree except through a bug; sweep.
        if (auto slot = registry_.find(stream); slot && registry_.block_count(*slot) != 0) sweep_slots({*slot});
        return ApplyResult::success();
      }
      if (it->second.slot) drop_stream(it->second, *it->second.slot);
      it->second.clear();
      return ApplyResult::success();
    }
  }
  return {ApplyStatus::invalid, "unknown event kind"};
}

std::optional<ConcurrentRadixTree::LockedBlock> ConcurrentRadixTree::locate_held_block(WorkerSlot slot, NodeRef start,
                                                                                       ExternalSequenceBlockHash hash,
                                                                                       std::uint32_t depth) const {
  if (!start) return std::nullopt;
  NodeRef node = std::move(start);
  ExclusiveLock lock(node->mutex_);
  while (true) {
    const RadixNode& n = *node;
    if (n.detached_ && n.merged_into_) {
      // Folded into its parent (tree_merge.cpp): the block sits there at the same depth.
      NodeRef up = n.merged_into_;
      lock.unlock();  // NOTE: released before the parent is locked: nobody locks upward while holding
      lock = ExclusiveLock(up->mutex_);
      node = std::move(up);
      continue;
    }
    if (n.detached_ || depth < n.start_depth_) return std::nullopt;
    const std::uint32_t covered = n.coverage_.covered(slot);
    if (depth < n.end_depth()) {
      const std::uint32_t position = depth - n.start_depth_;
      // NOTE: the stream's own name for the block; other streams may call it otherwise.
      if (covered <= position || n.name_of(slot, position) != hash) return std::nullopt;
      return LockedBlock{std::move(node), std::move(lock), position};
    }
    // The block moved below through a split. Only a full holder can hold anything below.
    if (covered < n.edge_length() || !n.continuation_) return std::nullopt;
    NodeRef next = n.continuation_;
    ExclusiveLock next_lock(next->mutex_);  // NOTE: continuation is a descendant: top-down order
    lock = std::move(next_lock);
    node = std::move(next);
  }
}

std::size_t ConcurrentRadixTree::block_count(WorkerWithDpRank stream) const {
  const auto slot = registry_.find(stream);
  return slot ? static_cast<std::size_t>(std::max<std::int64_t>(0, registry_.block_count(*slot))) : 0;
}

std::vector<std::pair<WorkerWithDpRank, std::size_t>> ConcurrentRadixTree::stream_block_counts() const {
  std::vector<std::pair<WorkerWithDpRank, std::size_t>> out;
  const std::uint32_t slots = registry_.slot_count();
  for (WorkerSlot slot = 0; slot < slots; ++slot) {
    const std::int64_t blocks = registry_.block_count(slot);
    if (blocks > 0) out.emplace_back(registry_.stream_of(slot), static_cast<std::size_t>(blocks));
  }
  return out;
}

}  // namespace kvidx
