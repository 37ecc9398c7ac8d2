#include "libindexer/load/prompt_path_arena.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace kvidx {
namespace {

void require(bool condition, const char* what) {
  if (!condition) throw std::logic_error(std::string("prompt path arena: ") + what);
}

}  // namespace

std::optional<PathNodeId> PromptPathArena::root(ExternalSequenceBlockHash first) const {
  const auto it = roots_.find(first);
  if (it == roots_.end()) return std::nullopt;
  return it->second;
}

std::optional<PathNodeId> PromptPathArena::child(PathNodeId parent, ExternalSequenceBlockHash first) const {
  const auto& children = node(parent).children;
  const auto it = children.find(first);
  if (it == children.end()) return std::nullopt;
  return it->second;
}

bool PromptPathArena::contains(PathNodeId id) const {
  return id.index < slots_.size() && slots_[id.index].live && slots_[id.index].generation == id.generation;
}

const PathNode& PromptPathArena::node(PathNodeId id) const {
  require(contains(id), "stale or foreign node id");
  return slots_[id.index].node;
}

PathNode& PromptPathArena::node(PathNodeId id) {
  require(contains(id), "stale or foreign node id");
  return slots_[id.index].node;
}

std::unordered_map<ExternalSequenceBlockHash, PathNodeId>& PromptPathArena::index_for(
    std::optional<PathNodeId> parent) {
  return parent ? node(*parent).children : roots_;
}

PathNodeId PromptPathArena::allocate(PathNode contents) {
  std::uint32_t index = 0;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[index];
  slot.live = true;
  slot.node = std::move(contents);
  ++live_nodes_;
  return PathNodeId{index, slot.generation};
}

PathNodeId PromptPathArena::insert_root(std::vector<ExternalSequenceBlockHash> edge, EdgeLiveness liveness) {
  require(!edge.empty(), "empty edge");
  const auto first = edge.front();
  require(!roots_.contains(first), "root already starts with this hash");
  const PathNodeId id = allocate(PathNode{std::move(edge), std::nullopt, {}, liveness});
  roots_.emplace(first, id);
  return id;
}

PathNodeId PromptPathArena::insert_child(PathNodeId parent, std::vector<ExternalSequenceBlockHash> edge,
                                         EdgeLiveness liveness) {
  require(!edge.empty(), "empty edge");
  const auto first = edge.front();
  require(!node(parent).children.contains(first), "sibling already starts with this hash");
  // NOTE: allocate() may grow slots_, so no reference into a node is held across it.
  const PathNodeId id = allocate(PathNode{std::move(edge), parent, {}, liveness});
  node(parent).children.emplace(first, id);
  return id;
}

PathNodeId PromptPathArena::split_keep_suffix(PathNodeId id, std::size_t prefix_len, EdgeLiveness prefix_liveness) {
  std::vector<ExternalSequenceBlockHash> prefix;
  std::optional<PathNodeId> parent;
  {
    PathNode& suffix = node(id);
    require(prefix_len > 0 && prefix_len < suffix.edge.size(), "split point outside the edge");
    const auto cut = suffix.edge.begin() + static_cast<std::ptrdiff_t>(prefix_len);
    prefix.assign(suffix.edge.begin(), cut);
    suffix.edge.erase(suffix.edge.begin(), cut);
    parent = suffix.parent;
  }
  const auto prefix_first = prefix.front();
  const PathNodeId prefix_id = allocate(PathNode{std::move(prefix), parent, {}, prefix_liveness});

  PathNode& suffix = node(id);
  suffix.parent = prefix_id;
  node(prefix_id).children.emplace(suffix.edge.front(), id);
  // The prefix starts with the same hash the suffix used to, so it takes over the same index slot.
  index_for(parent)[prefix_first] = prefix_id;
  return prefix_id;
}

PathNode PromptPathArena::remove_leaf(PathNodeId id) {
  require(node(id).children.empty(), "removing a node that still has children");
  Slot& slot = slots_[id.index];
  const auto first = slot.node.edge.front();
  const auto parent = slot.node.parent;
  index_for(parent).erase(first);

  PathNode removed = std::move(slot.node);
  slot.node = PathNode{};
  slot.live = false;
  ++slot.generation;  // invalidates every outstanding id of this node
  free_slots_.push_back(id.index);
  --live_nodes_;
  return removed;
}

std::vector<PathNodeId> PromptPathArena::path_from_root(PathNodeId tail) const {
  std::vector<PathNodeId> path;
  for (std::optional<PathNodeId> at = tail; at; at = node(*at).parent) path.push_back(*at);
  std::reverse(path.begin(), path.end());
  return path;
}

void PromptPathArena::check_topology() const {
  std::size_t live = 0;
  for_each_node([&](PathNodeId id, const PathNode& n) {
    ++live;
    require(!n.edge.empty(), "live node with an empty edge");
    if (n.parent) {
      require(contains(*n.parent), "parent link names a dead node");
      const auto& siblings = node(*n.parent).children;
      const auto it = siblings.find(n.edge.front());
      require(it != siblings.end() && it->second == id, "parent does not index its child");
    } else {
      const auto it = roots_.find(n.edge.front());
      require(it != roots_.end() && it->second == id, "root index misses a root");
    }
    for (const auto& [first, child_id] : n.children) {
      require(contains(child_id), "child link names a dead node");
      const PathNode& c = node(child_id);
      require(c.parent && *c.parent == id, "child does not point back at its parent");
      require(c.edge.front() == first, "child indexed under the wrong hash");
    }
  });
  require(live == live_nodes_, "live node count drifted");
  for (const auto& [first, id] : roots_) {
    require(contains(id), "root index names a dead node");
    require(!node(id).parent && node(id).edge.front() == first, "root index names a non-root");
  }
}

}  // namespace kvidx
