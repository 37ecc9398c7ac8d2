// RadixTreeTestPeer: the test-only entry points of the reference's tree tests (same names), reached
// as a friend of ConcurrentRadixTree and RadixNode so the production headers carry none of them.
// Header-only; include from *_test.cpp files and test support only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <utility>
#include <vector>

#include "libindexer/tree/radix_tree.h"

namespace kvidx {

// The tree's shape: every node's edge (local hashes) and its children, sorted by first local hash.
struct EdgeTopologyForTest {
  std::vector<std::uint64_t> edge;            // local hashes
  std::vector<EdgeTopologyForTest> children;  // sorted by first local hash

  friend bool operator==(const EdgeTopologyForTest&, const EdgeTopologyForTest&) = default;
};

class RadixTreeTestPeer {
 public:
  static const RadixNode& root(const ConcurrentRadixTree& tree) { return *tree.root_; }
  // References held on `node` (NodeRefs and lookup entries).
  static std::uint32_t refs(const RadixNode& node) { return node.refs_.load(); }

  // Lowers how many nodes `lookup`'s node table names before entries spill to its side map.
  static void limit_node_slots(WorkerLookup& lookup, std::uint32_t max_node_slots) {
    lookup.max_node_slots_ = max_node_slots;
  }

  static WorkerSlot slot_for_test(ConcurrentRadixTree& tree, WorkerWithDpRank stream) {
    return *tree.registry_.slot_for(stream);
  }

  // Stores `blocks` after `parent` as the store path would, but starting from `start` (a node the
  // test captured earlier and that may be stale by now) instead of the lookup's entry.
  static ApplyResult insert_blocks_from_for_test(ConcurrentRadixTree& tree, DirectLookup& lookup,
                                                 WorkerWithDpRank stream, const NodeRef& start,
                                                 ExternalSequenceBlockHash parent,
                                                 std::span<const StoredBlock> blocks) {
    ApplyResult failure;
    WorkerLookup* worker_lookup = tree.lookup_for(lookup, stream, failure);
    if (worker_lookup == nullptr) return failure;
    if (blocks.empty()) return {ApplyStatus::invalid, "no blocks"};
    const LookupEntry* entry = worker_lookup->find(parent);
    if (entry == nullptr) return {ApplyStatus::parent_not_found, "parent block unknown"};
    const LookupEntry parent_entry = *entry;
    return tree.store_after(*worker_lookup, *worker_lookup->slot, parent_entry, parent, blocks, start);
  }

  // Applies a Removed event's hashes with `group_node` as the hint the remove path tries first.
  static ApplyResult apply_removed_group(ConcurrentRadixTree& tree, DirectLookup& lookup, WorkerWithDpRank stream,
                                         NodeRef group_node, std::span<const ExternalSequenceBlockHash> hashes,
                                         std::uint64_t event_id) {
    (void)event_id;  // kept for parity with the reference's signature; events carry no per-id state here
    ApplyResult failure;
    WorkerLookup* worker_lookup = tree.lookup_for(lookup, stream, failure);
    if (worker_lookup == nullptr) return failure;
    return tree.apply_removed(*worker_lookup, *worker_lookup->slot, hashes, group_node);
  }

  static std::vector<std::size_t> edge_lengths_for_test(const ConcurrentRadixTree& tree) {
    return tree.node_edge_lengths();
  }

  static std::size_t raw_child_edge_count(const ConcurrentRadixTree& tree) { return tree.node_edge_lengths().size(); }

  static void run_cleanup_for_test(ConcurrentRadixTree& tree) { tree.run_cleanup(); }

  static std::vector<EdgeTopologyForTest> edge_topology_for_test(const ConcurrentRadixTree& tree) {
    return topology_below(*tree.root_);
  }

  // Nodes whose kept edge fingerprint differs from one recomputed from their edge (edge_fingerprint.h).
  static std::size_t stale_fingerprints(const ConcurrentRadixTree& tree) {
    std::size_t stale = 0;
    tree.for_each_node([&](const RadixNode& node) {
      if (node.edge_fingerprint_ != edge_fingerprint(node.edge_, node.start_depth_)) ++stale;
    });
    return stale;
  }

 private:
  static std::vector<EdgeTopologyForTest> topology_below(const RadixNode& node) {
    std::vector<NodeRef> children;
    {
      std::shared_lock lock(node.mutex_);
      for (const auto& [key, child] : node.children_.entries()) children.push_back(child);
    }
    std::vector<EdgeTopologyForTest> out;
    for (const auto& child : children) {
      EdgeTopologyForTest topology;
      {
        std::shared_lock lock(child->mutex_);
        for (const auto& block : child->edge_) topology.edge.push_back(block.local.value);
      }
      topology.children = topology_below(*child);
      out.push_back(std::move(topology));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.edge < b.edge; });
    return out;
  }
};

}  // namespace kvidx
