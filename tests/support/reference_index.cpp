#include "tests/support/reference_index.h"

#include <algorithm>

namespace kvidx::testing {
namespace {
constexpr std::uint64_t kRootKey = ~std::uint64_t{0};  // edge-map parent key for root children
}

void ReferenceIndex::apply(const RouterEvent& event) {
  const WorkerWithDpRank id = event.stream();
  if (const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data)) {
    Stream& stream = streams_[id];
    bool has_parent = stored->parent_hash.has_value();
    std::uint64_t parent = has_parent ? stored->parent_hash->value : 0;
    if (has_parent && stream.blocks.count(parent) == 0) return;  // unknown parent: whole store dropped
    for (const auto& block : stored->blocks) {
      const std::uint64_t hash = block.block_hash.value;
      if (stream.blocks.count(hash) == 0) {
        stream.blocks.emplace(hash, Block{block.tokens_hash, parent, has_parent, {}});
        stream.edges[{has_parent ? parent : kRootKey, block.tokens_hash.value}] = hash;
        if (has_parent)
          stream.blocks.at(parent).children.push_back(hash);
        else
          stream.roots.insert(hash);
      }
      parent = hash;
      has_parent = true;
    }
  } else if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    for (const auto& hash : removed->block_hashes) {
      if (it->second.blocks.count(hash.value) != 0) remove_subtree(it->second, hash.value);
    }
  } else {
    streams_.erase(id);
  }
}

void ReferenceIndex::remove_subtree(Stream& stream, std::uint64_t hash) {
  // Detach from the parent, then drop the subtree iteratively.
  const Block& top = stream.blocks.at(hash);
  if (top.has_parent) {
    auto& siblings = stream.blocks.at(top.parent).children;
    siblings.erase(std::remove(siblings.begin(), siblings.end(), hash), siblings.end());
  } else {
    stream.roots.erase(hash);
  }
  std::vector<std::uint64_t> pending{hash};
  while (!pending.empty()) {
    const std::uint64_t h = pending.back();
    pending.pop_back();
    auto node = stream.blocks.find(h);
    pending.insert(pending.end(), node->second.children.begin(), node->second.children.end());
    stream.edges.erase({node->second.has_parent ? node->second.parent : kRootKey, node->second.local.value});
    stream.blocks.erase(node);
  }
}

std::map<WorkerWithDpRank, std::uint32_t> ReferenceIndex::scores(std::span<const LocalBlockHash> query) const {
  std::map<WorkerWithDpRank, std::uint32_t> out;
  for (const auto& [id, stream] : streams_) {
    std::uint64_t parent = kRootKey;
    std::uint32_t depth = 0;
    for (const auto& local : query) {
      auto edge = stream.edges.find({parent, local.value});
      if (edge == stream.edges.end()) break;
      parent = edge->second;
      ++depth;
    }
    if (depth > 0) out[id] = depth;
  }
  return out;
}

std::size_t ReferenceIndex::block_count(WorkerWithDpRank stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? 0 : it->second.blocks.size();
}

std::size_t ReferenceIndex::total_blocks() const {
  std::size_t total = 0;
  for (const auto& [id, stream] : streams_) total += stream.blocks.size();
  return total;
}

}  // namespace kvidx::testing
