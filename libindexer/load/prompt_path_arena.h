// Storage for BlockTracker: a path-compressed trie of prompt sequence hashes, one edge per node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx {

// Names one arena node. The generation makes an id of a removed node stale instead of silently
// aliasing whichever node later reuses its slot.
struct PathNodeId {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;

  friend bool operator==(const PathNodeId&, const PathNodeId&) = default;
};

struct PathNodeIdHasher {
  std::size_t operator()(const PathNodeId& id) const noexcept {
    return std::hash<std::uint64_t>{}((std::uint64_t{id.generation} << 32U) | id.index);
  }
};

// What BlockTracker records on each edge.
struct EdgeLiveness {
  // Requests whose prompt ends exactly at the last block of this edge.
  std::uint32_t terminal_owners = 0;
  // Load weight of each block of the edge; absent means 1.
  std::optional<double> fraction;

  double weight(std::size_t edge_len) const { return static_cast<double>(edge_len) * fraction.value_or(1.0); }
};

struct PathNode {
  std::vector<ExternalSequenceBlockHash> edge;  // never empty while the node is live
  std::optional<PathNodeId> parent;             // absent for a root
  // Keyed by the first hash of the child's edge; siblings never share a first hash.
  std::unordered_map<ExternalSequenceBlockHash, PathNodeId> children;
  EdgeLiveness liveness;
};

// PromptPathArena owns the nodes of a compressed prefix trie and keeps parent/child links and the
// root index consistent across insertion, edge splits and leaf removal. It never merges edges on
// its own, so an id stays valid until that very node is removed.
//
// Every walk is a loop (no recursion), so a chain of any depth is safe. Not thread-safe.
class PromptPathArena {
 public:
  std::optional<PathNodeId> root(ExternalSequenceBlockHash first) const;
  std::optional<PathNodeId> child(PathNodeId parent, ExternalSequenceBlockHash first) const;

  // REQUIRES: `edge` is non-empty and no root (child of `parent`) starts with edge.front().
  PathNodeId insert_root(std::vector<ExternalSequenceBlockHash> edge, EdgeLiveness liveness);
  PathNodeId insert_child(PathNodeId parent, std::vector<ExternalSequenceBlockHash> edge, EdgeLiveness liveness);

  // Cuts the edge of `node` after `prefix_len` blocks (0 < prefix_len < edge length). A new node
  // takes the first part and `prefix_liveness`; `node` keeps its id, its liveness and the rest of the
  // edge, so handles that name it stay valid. Returns the new prefix node.
  PathNodeId split_keep_suffix(PathNodeId node, std::size_t prefix_len, EdgeLiveness prefix_liveness);

  // Unlinks a childless node and returns its contents. The parent stays, even if now childless.
  PathNode remove_leaf(PathNodeId node);

  // Ids from the root down to `tail`, inclusive.
  std::vector<PathNodeId> path_from_root(PathNodeId tail) const;

  bool contains(PathNodeId id) const;
  // Throws std::logic_error for a stale id.
  const PathNode& node(PathNodeId id) const;
  PathNode& node(PathNodeId id);

  std::size_t size() const { return live_nodes_; }
  bool empty() const { return live_nodes_ == 0; }

  // Calls f(PathNodeId, const PathNode&) for each live node, in slot order.
  template <typename F>
  void for_each_node(F&& f) const {
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].live) f(PathNodeId{i, slots_[i].generation}, slots_[i].node);
    }
  }

  // Test support: throws std::logic_error if links, root index or live count disagree.
  void check_topology() const;

 private:
  struct Slot {
    std::uint32_t generation = 0;
    bool live = false;
    PathNode node;
  };

  PathNodeId allocate(PathNode node);
  // The map (roots_ or the parent's children) that indexes a node with this parent.
  std::unordered_map<ExternalSequenceBlockHash, PathNodeId>& index_for(std::optional<PathNodeId> parent);

  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::unordered_map<ExternalSequenceBlockHash, PathNodeId> roots_;
  std::size_t live_nodes_ = 0;
};

}  // namespace kvidx
