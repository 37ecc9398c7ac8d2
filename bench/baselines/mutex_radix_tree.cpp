#include "bench/baselines/mutex_radix_tree.h"

#include <algorithm>
#include <deque>
#include <variant>

namespace kvidx::bench {

MutexRadixTree::MutexRadixTree() : root_(std::make_unique<Node>()) {}

MutexRadixTree::~MutexRadixTree() {
  // NOTE: iterative teardown; a deep chain would overflow the stack through recursive unique_ptrs.
  std::vector<std::unique_ptr<Node>> stack;
  stack.push_back(std::move(root_));
  while (!stack.empty()) {
    auto node = std::move(stack.back());
    stack.pop_back();
    for (auto& [key, child] : node->children) stack.push_back(std::move(child));
  }
}

std::size_t MutexRadixTree::node_count() const {
  std::lock_guard lock(mutex_);
  return nodes_;
}

bool MutexRadixTree::apply_event(const RouterEvent& event) {
  std::lock_guard lock(mutex_);
  const WorkerWithDpRank stream = event.stream();
  if (const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data)) return store_locked(stream, *stored);
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    return remove_locked(stream, removed->block_hashes);
  }
  clear_locked(stream);
  return true;
}

bool MutexRadixTree::store_locked(WorkerWithDpRank stream, const KvCacheStoreData& data) {
  Lookup& lookup = lookups_[stream];
  Node* node = root_.get();
  if (data.parent_hash) {
    const auto it = lookup.find(*data.parent_hash);
    if (it == lookup.end()) return false;
    node = it->second;
  }
  for (const StoredBlock& block : data.blocks) {
    auto& slot = node->children[block.tokens_hash];
    if (!slot) {
      slot = std::make_unique<Node>();
      slot->parent = node;
      slot->local = block.tokens_hash;
      slot->external = block.block_hash;
      ++nodes_;
    }
    node = slot.get();
    node->holders.insert(stream);
    lookup[block.block_hash] = node;
  }
  return true;
}

bool MutexRadixTree::remove_locked(WorkerWithDpRank stream, std::span<const ExternalSequenceBlockHash> hashes) {
  const auto found = lookups_.find(stream);
  if (found == lookups_.end()) return hashes.empty();
  bool all = true;
  for (const auto hash : hashes) {
    const auto it = found->second.find(hash);
    if (it == found->second.end()) {
      all = false;
      continue;
    }
    Node* node = it->second;
    found->second.erase(it);
    release_locked(node, stream);
  }
  return all;
}

void MutexRadixTree::clear_locked(WorkerWithDpRank stream) {
  const auto found = lookups_.find(stream);
  if (found == lookups_.end()) return;
  // NOTE: deepest first, so a parent is pruned only after its children were.
  std::vector<Node*> nodes;
  nodes.reserve(found->second.size());
  for (const auto& [hash, node] : found->second) nodes.push_back(node);
  lookups_.erase(found);
  std::vector<std::pair<std::size_t, Node*>> by_depth;
  by_depth.reserve(nodes.size());
  for (Node* node : nodes) {
    std::size_t depth = 0;
    for (const Node* p = node; p->parent != nullptr; p = p->parent) ++depth;
    by_depth.emplace_back(depth, node);
  }
  std::sort(by_depth.begin(), by_depth.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [depth, node] : by_depth) release_locked(node, stream);
}

void MutexRadixTree::release_locked(Node* node, WorkerWithDpRank stream) {
  node->holders.erase(stream);
  while (node != root_.get() && node->holders.empty() && node->children.empty()) {
    Node* parent = node->parent;
    parent->children.erase(node->local);  // frees node
    --nodes_;
    node = parent;
  }
}

OverlapScores MutexRadixTree::find_matches(std::span<const LocalBlockHash> query, bool early_exit) const {
  OverlapScores out;
  std::unordered_map<WorkerWithDpRank, std::uint32_t, WorkerWithDpRankHasher> scores;
  std::lock_guard lock(mutex_);
  const Node* node = root_.get();
  for (const LocalBlockHash local : query) {
    const auto it = node->children.find(local);
    if (it == node->children.end()) break;
    node = it->second.get();
    for (const auto& holder : node->holders) ++scores[holder];
    out.frequencies.push_back(node->holders.size());
    if (early_exit && node->holders.size() == 1) break;
  }
  for (const auto& [stream, score] : scores) {
    out.scores.append(stream, score);
    const auto it = lookups_.find(stream);
    out.tree_sizes.append(stream, it == lookups_.end() ? 0 : it->second.size());
  }
  return out;
}

std::vector<RouterEvent> MutexRadixTree::dump_events() const {
  std::lock_guard lock(mutex_);
  std::vector<RouterEvent> out;
  std::deque<const Node*> queue;
  for (const auto& [key, child] : root_->children) queue.push_back(child.get());
  while (!queue.empty()) {
    const Node* node = queue.front();
    queue.pop_front();
    for (const auto& holder : node->holders) {
      KvCacheStoreData data;
      if (node->parent != root_.get()) data.parent_hash = node->parent->external;
      data.blocks.push_back(StoredBlock{node->external, node->local});
      out.push_back(
          RouterEvent{holder.worker_id, KvCacheEvent{out.size(), std::move(data), holder.dp_rank}, std::nullopt});
    }
    for (const auto& [key, child] : node->children) queue.push_back(child.get());
  }
  return out;
}

}  // namespace kvidx::bench
