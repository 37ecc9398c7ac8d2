#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <string>

namespace kvidx {

namespace {

using SharedLock = std::shared_lock<std::shared_mutex>;

std::uint32_t to_u32(std::size_t n) { return static_cast<std::uint32_t>(n); }

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

// ---------------------------------------------------------------------------------------------
// Events

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

ApplyResult ConcurrentRadixTree::apply_stored(WorkerLookup& lookup, WorkerSlot slot, const KvCacheStoreData& data) {
  if (!data.parent_hash) return store_from_root(lookup, slot, data.blocks);
  const LookupEntry* entry = lookup.find(*data.parent_hash);
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
  if (!held && start != parent_entry.node) held = locate_held_block(slot, parent_entry.node, parent, parent_entry.depth);
  if (!held) {
    // The entry outlived the block (cut below a removed ancestor): scrub it with the rejection.
    lookup.erase(parent);
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
    while (offset + matched < length && matched < blocks.size() &&
           n.edge_[offset + matched].local == blocks[matched].tokens_hash) {
      ++matched;
    }
    if (!is_root && matched + offset > 0) {
      const std::uint32_t reach = offset + matched;
      const std::uint32_t before = n.coverage_.covered(slot);
      if (reach > before) {
        n.coverage_.set(slot, reach);
        registry_.add_blocks(slot, reach - before);
      }
      for (std::uint32_t i = 0; i < matched; ++i) {
        lookup.insert_or_assign(blocks[i].block_hash, node, n.start_depth_ + offset + i);
      }
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
      for (const auto& block : blocks) n.edge_.push_back(EdgeBlock{block.tokens_hash, block.block_hash});
      n.coverage_.set(slot, n.edge_length());
      registry_.add_blocks(slot, static_cast<std::int64_t>(blocks.size()));
      attached_blocks_.fetch_add(blocks.size(), std::memory_order_relaxed);
      ++n.shape_version_;
      for (std::uint32_t i = 0; i < blocks.size(); ++i) {
        lookup.insert_or_assign(blocks[i].block_hash, node, n.start_depth_ + start + i);
      }
      return;
    }
    NodeRef child = new_child_locked(n, slot, blocks);
    for (std::uint32_t i = 0; i < blocks.size(); ++i) {
      lookup.insert_or_assign(blocks[i].block_hash, child, child->start_depth_ + i);
    }
    return;
  }
}

void ConcurrentRadixTree::split_locked(RadixNode& node, std::uint32_t keep) {
  std::vector<EdgeBlock> tail(node.edge_.begin() + keep, node.edge_.end());
  node.edge_.resize(keep);
  NodeRef suffix(new RadixNode(node.start_depth_ + keep, std::move(tail)));
  // The suffix is invisible until node's lock is released, so it is filled without its own lock.
  suffix->coverage_ = node.coverage_.split_off(keep);
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
  child->coverage_.set(slot, child->edge_length());
  registry_.add_blocks(slot, static_cast<std::int64_t>(blocks.size()));
  parent.children_.insert(blocks.front().tokens_hash, child);
  parent.sealed_ = true;
  ++parent.shape_version_;
  node_count_.fetch_add(1, std::memory_order_relaxed);
  attached_blocks_.fetch_add(blocks.size(), std::memory_order_relaxed);
  return child;
}

std::optional<ConcurrentRadixTree::LockedBlock> ConcurrentRadixTree::locate_held_block(
    WorkerSlot slot, NodeRef start, ExternalSequenceBlockHash hash, std::uint32_t depth) const {
  if (!start) return std::nullopt;
  NodeRef node = std::move(start);
  ExclusiveLock lock(node->mutex_);
  while (true) {
    const RadixNode& n = *node;
    if (n.detached_ || depth < n.start_depth_) return std::nullopt;
    const std::uint32_t covered = n.coverage_.covered(slot);
    if (depth < n.end_depth()) {
      const std::uint32_t position = depth - n.start_depth_;
      if (n.edge_[position].external != hash || covered <= position) return std::nullopt;
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

ApplyResult ConcurrentRadixTree::apply_removed(WorkerLookup& lookup, WorkerSlot slot,
                                               std::span<const ExternalSequenceBlockHash> hashes,
                                               const NodeRef& hint) {
  std::vector<RemovalTarget> targets;
  targets.reserve(hashes.size());
  std::size_t unknown = 0;
  for (const auto hash : hashes) {
    const LookupEntry* entry = lookup.find(hash);
    if (entry == nullptr) {
      ++unknown;
      continue;
    }
    const LookupEntry recorded = *entry;
    std::optional<LockedBlock> held;
    if (hint && hint != recorded.node) held = locate_held_block(slot, hint, hash, recorded.depth);
    if (!held) held = locate_held_block(slot, recorded.node, hash, recorded.depth);
    if (!held) continue;  // no longer held (cut below an earlier removal): the entry is scrubbed below
    targets.push_back(RemovalTarget{held->node, hash, recorded.depth});
  }
  // NOTE: deepest first. Cutting a suffix scrubs the lookup entries of its own edge while the
  // stream still holds it; the later, shallower cut then drops what remains below. Within one node
  // the shallowest position wins, so the result is the cut at the minimum position whatever the
  // order of the hashes in the event.
  std::sort(targets.begin(), targets.end(),
            [](const RemovalTarget& a, const RemovalTarget& b) { return a.depth > b.depth; });
  for (auto& target : targets) {
    std::optional<LockedBlock> held = locate_held_block(slot, std::move(target.node), target.hash, target.depth);
    if (held) cut_locked(&lookup, slot, *held);
  }
  for (const auto hash : hashes) lookup.erase(hash);
  if (unknown > 0) {
    return {ApplyStatus::block_not_found,
            std::to_string(unknown) + " of " + std::to_string(hashes.size()) + " removed blocks unknown"};
  }
  return ApplyResult::success();
}

void ConcurrentRadixTree::cut_locked(WorkerLookup* lookup, WorkerSlot slot, LockedBlock& at) {
  RadixNode& n = *at.node;
  const std::uint32_t position = at.position;
  const std::uint32_t before = n.coverage_.covered(slot);
  if (before <= position) return;
  n.coverage_.set(slot, position);
  registry_.add_blocks(slot, -static_cast<std::int64_t>(before - position));
  if (lookup != nullptr) {
    for (std::uint32_t i = position; i < before; ++i) lookup->erase(n.edge_[i].external);
  }
  if (n.coverage_.empty()) note_coverage_lost(n);
  if (before < n.edge_length()) return;  // a partial holder holds nothing below (prefix closure)
  std::vector<NodeRef> below;
  below.reserve(n.children_.size());
  for (const auto& [key, child] : n.children_.entries()) below.push_back(child);
  at.lock.unlock();
  drop_from_subtrees(slot, std::move(below));
}

void ConcurrentRadixTree::drop_from_subtrees(WorkerSlot slot, std::vector<NodeRef> stack) {
  // Lookup entries of these blocks are left in place: they are stale and get scrubbed when the
  // stream names them again (remove, parent of a store) or clears.
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    ExclusiveLock lock(node->mutex_);
    const std::uint32_t had = node->coverage_.set(slot, 0);
    if (had == 0) continue;
    registry_.add_blocks(slot, -static_cast<std::int64_t>(had));
    if (node->coverage_.empty()) note_coverage_lost(*node);
    if (had == node->edge_length()) {
      for (const auto& [key, child] : node->children_.entries()) stack.push_back(child);
    }
  }
}

void ConcurrentRadixTree::note_coverage_lost(const RadixNode& node) {
  dead_blocks_estimate_.fetch_add(node.edge_.size(), std::memory_order_relaxed);
}

void ConcurrentRadixTree::drop_stream(WorkerLookup& lookup, WorkerSlot slot) {
  std::vector<NodeRef> nodes;
  nodes.reserve(lookup.size());
  lookup.for_each([&](ExternalSequenceBlockHash, const LookupEntry& entry) { nodes.push_back(entry.node); });
  std::sort(nodes.begin(), nodes.end(), [](const NodeRef& a, const NodeRef& b) { return a.get() < b.get(); });
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (auto& node : nodes) {
    ExclusiveLock lock(node->mutex_);
    if (node->detached_) continue;
    LockedBlock at{std::move(node), std::move(lock), 0};
    cut_locked(nullptr, slot, at);
  }
  lookup.clear();
  // Every held block has an entry leading to it, so this is a safety net, not the common path.
  if (registry_.block_count(slot) != 0) sweep_slots({slot});
}

void ConcurrentRadixTree::sweep_slots(const std::vector<WorkerSlot>& slots) {
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
      const std::uint32_t had = node->coverage_.set(slot, 0);
      if (had == 0) continue;
      dropped = true;
      registry_.add_blocks(slot, -static_cast<std::int64_t>(had));
      held_fully = held_fully || had == node->edge_length();
    }
    if (dropped && node->coverage_.empty()) note_coverage_lost(*node);
    if (held_fully) {
      for (const auto& [key, child] : node->children_.entries()) stack.push_back(child);
    }
  }
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

// ---------------------------------------------------------------------------------------------
// Queries

OverlapScores ConcurrentRadixTree::find_matches(std::span<const LocalBlockHash> query, bool early_exit) const {
  OverlapScores out;
  if (query.empty()) return out;

  struct Hit {
    WorkerSlot slot;
    std::uint32_t score;
  };
  // NOTE: per-thread scratch keeps the traversal free of heap allocation after warm-up.
  thread_local std::vector<Hit> hits;
  thread_local std::vector<std::uint32_t> active;  // indices into hits, ascending slot order
  hits.clear();
  active.clear();

  SharedLock lock(root_->mutex_);
  const RadixNode* node = root_.get();
  std::uint32_t depth = 0;
  bool first = true;
  while (depth < query.size()) {
    const RadixNode* child = node->children_.find(query[depth]);
    if (child == nullptr) break;
    SharedLock child_lock(child->mutex_);
    lock = std::move(child_lock);  // NOTE: hand over hand: child locked before parent released
    node = child;

    const std::uint32_t length = child->edge_length();
    std::uint32_t matched = 1;  // the child key is the edge's first local hash
    while (matched < length && depth + matched < query.size() &&
           child->edge_[matched].local == query[depth + matched]) {
      ++matched;
    }
    const auto coverage = child->coverage_.entries();
    if (first) {
      first = false;
      for (const auto& entry : coverage) {
        const std::uint32_t reach = std::min(entry.covered, matched);
        hits.push_back(Hit{entry.slot, depth + reach});
        if (reach == length) active.push_back(to_u32(hits.size() - 1));
      }
    } else {
      const bool gallop = coverage.size() > 4 * active.size();
      std::size_t kept = 0;
      const CoverageEntry* cursor = coverage.data();
      const CoverageEntry* const end = coverage.data() + coverage.size();
      for (const std::uint32_t index : active) {
        const WorkerSlot slot = hits[index].slot;
        if (gallop) {
          cursor = std::lower_bound(cursor, end, slot, [](const CoverageEntry& e, WorkerSlot s) { return e.slot < s; });
        } else {
          while (cursor != end && cursor->slot < slot) ++cursor;
        }
        const std::uint32_t covered = (cursor != end && cursor->slot == slot) ? cursor->covered : 0;
        const std::uint32_t reach = std::min(covered, matched);
        hits[index].score = depth + reach;
        if (reach == length) active[kept++] = index;
      }
      active.resize(kept);
    }
    depth += matched;
    if (matched < length || active.empty()) break;
    if (early_exit && active.size() == 1) break;
  }
  lock.unlock();

  std::uint32_t max_score = 0;
  out.scores.reserve(hits.size());
  out.tree_sizes.reserve(hits.size());
  for (const auto& hit : hits) {
    const WorkerWithDpRank stream = registry_.stream_of(hit.slot);
    // Each slot appears once in hits, so the results need no lookups.
    out.scores.append(stream, hit.score);
    out.tree_sizes.append(stream, static_cast<std::size_t>(std::max<std::int64_t>(0, registry_.block_count(hit.slot))));
    max_score = std::max(max_score, hit.score);
  }
  // frequencies[d] = streams whose match reaches past depth d.
  out.frequencies.assign(max_score, 0);
  for (const auto& hit : hits) {
    if (hit.score > 0) ++out.frequencies[hit.score - 1];
  }
  for (std::size_t d = max_score; d-- > 1;) out.frequencies[d - 1] += out.frequencies[d];
  return out;
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

std::vector<RouterEvent> ConcurrentRadixTree::dump_events() const {
  struct Pending {
    NodeRef node;
    std::optional<ExternalSequenceBlockHash> parent_tail;
  };
  std::vector<RouterEvent> events;
  std::vector<Pending> stack;
  {
    SharedLock root_lock(root_->mutex_);
    for (const auto& [key, child] : root_->children_.entries()) stack.push_back(Pending{child, std::nullopt});
  }
  std::uint64_t event_id = 0;
  while (!stack.empty()) {
    Pending pending = std::move(stack.back());
    stack.pop_back();
    SharedLock lock(pending.node->mutex_);
    const RadixNode& n = *pending.node;
    for (const auto& entry : n.coverage_.entries()) {
      const WorkerWithDpRank stream = registry_.stream_of(entry.slot);
      KvCacheStoreData data;
      data.parent_hash = pending.parent_tail;
      data.blocks.reserve(entry.covered);
      for (std::uint32_t i = 0; i < entry.covered; ++i) {
        data.blocks.push_back(StoredBlock{n.edge_[i].external, n.edge_[i].local, std::nullopt});
      }
      events.push_back(RouterEvent{stream.worker_id, KvCacheEvent{event_id++, std::move(data), stream.dp_rank},
                                   std::nullopt});
    }
    if (n.edge_.empty()) continue;
    for (const auto& [key, child] : n.children_.entries()) stack.push_back(Pending{child, n.edge_.back().external});
  }
  return events;
}

std::vector<std::size_t> ConcurrentRadixTree::node_edge_lengths() const {
  std::vector<std::size_t> lengths;
  std::vector<NodeRef> stack{root_};
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    SharedLock lock(node->mutex_);
    if (node != root_) lengths.push_back(node->edge_.size());
    for (const auto& [key, child] : node->children_.entries()) stack.push_back(child);
  }
  std::sort(lengths.begin(), lengths.end());
  return lengths;
}

std::size_t ConcurrentRadixTree::raw_child_edge_count() const { return node_edge_lengths().size(); }

std::vector<EdgeTopologyForTest> ConcurrentRadixTree::edge_topology_for_test() const {
  auto build = [](const auto& self, const RadixNode& node) -> std::vector<EdgeTopologyForTest> {
    std::vector<NodeRef> children;
    {
      SharedLock lock(node.mutex_);
      for (const auto& [key, child] : node.children_.entries()) children.push_back(child);
    }
    std::vector<EdgeTopologyForTest> out;
    for (const auto& child : children) {
      EdgeTopologyForTest topology;
      {
        SharedLock lock(child->mutex_);
        for (const auto& block : child->edge_) topology.edge.push_back(block.local.value);
      }
      topology.children = self(self, *child);
      out.push_back(std::move(topology));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.edge < b.edge; });
    return out;
  };
  return build(build, *root_);
}

// ---------------------------------------------------------------------------------------------
// Cleanup

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
    {
      // Shared pass: find candidates without excluding readers.
      SharedLock parent_lock(parent->mutex_);
      if (parent->detached_) continue;
      for (const auto& [key, child] : parent->children_.entries()) {
        SharedLock child_lock(child->mutex_);
        (child->coverage_.empty() ? dead : live).push_back(child);
      }
    }
    if (!dead.empty()) {
      std::vector<NodeRef> detached;
      {
        ExclusiveLock parent_lock(parent->mutex_);
        for (auto& candidate : dead) {
          ExclusiveLock child_lock(candidate->mutex_);
          // NOTE: re-checked under both locks: a store may have revived it since the shared pass.
          if (!candidate->coverage_.empty() || candidate->detached_) continue;
          const RadixNode* current = parent->children_.find(candidate->edge_.front().local);
          if (current != candidate.get()) continue;
          parent->children_.erase(candidate->edge_.front().local);
          if (parent->continuation_ == candidate) parent->continuation_ = NodeRef{};
          ++parent->shape_version_;
          // Marked here, under the parent's lock, so no lookup-guided writer can use it afterwards.
          candidate->detached_ = true;
          ++candidate->shape_version_;
          detached.push_back(candidate);
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
    ++stats.nodes_removed;
    stats.blocks_removed += node->edge_.size();
    node_count_.fetch_sub(1, std::memory_order_relaxed);
    attached_blocks_.fetch_sub(node->edge_.size(), std::memory_order_relaxed);
    std::vector<EdgeBlock>().swap(node->edge_);  // stale lookups may pin the node; free its edge
    node->continuation_ = NodeRef{};
    for (auto& [key, child] : node->children_.take_all()) stack.push_back(std::move(child));
  }
}

// ---------------------------------------------------------------------------------------------
// Test-only entry points

WorkerSlot ConcurrentRadixTree::slot_for_test(WorkerWithDpRank stream) { return *registry_.slot_for(stream); }

ApplyResult ConcurrentRadixTree::insert_blocks_from_for_test(DirectLookup& lookup, WorkerWithDpRank stream,
                                                             const NodeRef& start, ExternalSequenceBlockHash parent,
                                                             std::span<const StoredBlock> blocks) {
  ApplyResult failure;
  WorkerLookup* worker_lookup = lookup_for(lookup, stream, failure);
  if (worker_lookup == nullptr) return failure;
  if (blocks.empty()) return {ApplyStatus::invalid, "no blocks"};
  const LookupEntry* entry = worker_lookup->find(parent);
  if (entry == nullptr) return {ApplyStatus::parent_not_found, "parent block unknown"};
  const LookupEntry parent_entry = *entry;
  return store_after(*worker_lookup, *worker_lookup->slot, parent_entry, parent, blocks, start);
}

ApplyResult ConcurrentRadixTree::apply_removed_group(DirectLookup& lookup, WorkerWithDpRank stream, NodeRef group_node,
                                                     std::span<const ExternalSequenceBlockHash> hashes,
                                                     std::uint64_t event_id) {
  (void)event_id;  // kept for parity with the reference's signature; events carry no per-id state here
  ApplyResult failure;
  WorkerLookup* worker_lookup = lookup_for(lookup, stream, failure);
  if (worker_lookup == nullptr) return failure;
  return apply_removed(*worker_lookup, *worker_lookup->slot, hashes, group_node);
}

}  // namespace kvidx
