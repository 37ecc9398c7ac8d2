// ConcurrentRadixTree read out whole: the tree as Stored events (snapshots, `kvidx dump`) and the
// edge length of every node (stats). Both take shared locks node by node, concurrently with writers.
#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace kvidx {

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

}  // namespace kvidx
