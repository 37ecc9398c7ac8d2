// ConcurrentRadixTree read out whole: the tree as Stored events (snapshots, `kvidx dump`) and the
// edge length of every node (stats). A dump has, per stream, one event per stretch of its coverage
// between branching nodes (a linear chain is one event across pass-through nodes), each block under
// the stream's own external hash, so replaying it rebuilds the same index and lookups. Both take shared locks node by
// node, concurrently with writers.
#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace kvidx {

std::vector<RouterEvent> ConcurrentRadixTree::dump_events() const {
  // A full holder of a node and the name it gave the node's last block (its children's parent).
  struct SlotTail {
    WorkerSlot slot;
    ExternalSequenceBlockHash name;
  };
  struct Pending {
    NodeRef node;
    std::shared_ptr<const std::vector<SlotTail>> parent_tails;  // sorted by slot; null below the root
    std::vector<std::pair<WorkerSlot, std::size_t>> open;       // events continuing into this node
  };
  std::vector<RouterEvent> events;
  std::vector<Pending> stack;
  // NOTE: the walk releases a node before it visits the children it noted; a merge in between
  // would move a child's blocks up into a node already dumped. Merges wait while this is held.
  std::shared_lock gate(merge_gate_);
  {
    SharedLock root_lock(root_->mutex_);
    for (const auto& [key, child] : root_->children_.entries()) stack.push_back(Pending{child, nullptr, {}});
  }
  std::vector<NodeRef> live;
  while (!stack.empty()) {
    Pending pending = std::move(stack.back());
    stack.pop_back();
    SharedLock lock(pending.node->mutex_);
    const RadixNode& n = *pending.node;
    if (n.detached_ || n.edge_.empty() || n.coverage_.empty()) continue;  // nothing held here or below
    live.clear();
    for (const auto& [key, child] : n.children_.entries()) {
      SharedLock child_lock(child->mutex_);  // NOTE: parent before child: top-down order
      if (!child->coverage_.empty()) live.push_back(child);
    }
    // A node with one held child is a pass-through: a chain running through it stays one event.
    const bool pass_through = live.size() == 1;
    auto tails = std::make_shared<std::vector<SlotTail>>();
    std::vector<std::pair<WorkerSlot, std::size_t>> open;
    for (const auto& entry : n.coverage_.entries()) {
      std::size_t index = events.size();
      // NOTE: `open` is built in coverage order, i.e. sorted by slot.
      auto continued = std::lower_bound(pending.open.begin(), pending.open.end(), entry.slot,
                                        [](const auto& o, WorkerSlot s) { return o.first < s; });
      if (continued != pending.open.end() && continued->first == entry.slot) {
        index = continued->second;
      } else {
        std::optional<ExternalSequenceBlockHash> parent;
        if (pending.parent_tails) {
          auto tail = std::lower_bound(pending.parent_tails->begin(), pending.parent_tails->end(), entry.slot,
                                       [](const SlotTail& t, WorkerSlot s) { return t.slot < s; });
          // Not a full holder of the parent: a concurrent cut is dropping it from here; skip.
          if (tail == pending.parent_tails->end() || tail->slot != entry.slot) continue;
          parent = tail->name;
        }
        const WorkerWithDpRank stream = registry_.stream_of(entry.slot);
        KvCacheStoreData data;
        data.parent_hash = parent;
        events.push_back(
            RouterEvent{stream.worker_id, KvCacheEvent{events.size(), std::move(data), stream.dp_rank}, std::nullopt});
      }
      // Each stream's own names (edge_names.h), so the dump replays to the same lookups.
      auto& blocks = std::get<KvCacheStoreData>(events[index].event.data).blocks;
      // NOTE: only a new event reserves: a chain through pass-through nodes appends node by node,
      // and reserving the exact size at each would copy its blocks once per node (quadratic).
      if (blocks.empty()) blocks.reserve(entry.covered);
      for (std::uint32_t i = 0; i < entry.covered; ++i) {
        blocks.push_back(StoredBlock{n.name_of(entry.slot, i), n.edge_[i].local});
      }
      if (entry.covered == n.edge_length()) {
        tails->push_back(SlotTail{entry.slot, n.name_of(entry.slot, n.edge_length() - 1)});
        if (pass_through) open.emplace_back(entry.slot, index);
      }
    }
    if (tails->empty()) continue;  // no full holder: nothing below is held
    if (pass_through) {
      stack.push_back(Pending{std::move(live.front()), std::move(tails), std::move(open)});
      continue;
    }
    for (auto& child : live) stack.push_back(Pending{std::move(child), tails, {}});
  }
  return events;
}

std::vector<std::size_t> ConcurrentRadixTree::node_edge_lengths() const {
  std::vector<std::size_t> lengths;
  for_each_node([&](const RadixNode& node) {
    if (&node != root_.get()) lengths.push_back(node.edge_.size());
  });
  std::sort(lengths.begin(), lengths.end());
  return lengths;
}

}  // namespace kvidx
