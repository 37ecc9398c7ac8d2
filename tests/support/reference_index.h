// The simplest correct index, for checking the real one: per (worker, rank), external hash →
// (local hash, parent). Store with an unknown parent is dropped whole; remove drops the block and
// everything below it; score walks the query from the root. Single-threaded, no compression.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx::testing {

class ReferenceIndex {
 public:
  void apply(const RouterEvent& event);
  // Score of every (worker, rank) with score > 0, ordered by (worker, rank).
  std::map<WorkerWithDpRank, std::uint32_t> scores(std::span<const LocalBlockHash> query) const;
  std::size_t block_count(WorkerWithDpRank stream) const;
  std::size_t total_blocks() const;
  void remove_stream(WorkerWithDpRank stream) { streams_.erase(stream); }

 private:
  struct Block {
    LocalBlockHash local;
    std::uint64_t parent = 0;
    bool has_parent = false;
    std::vector<std::uint64_t> children;
  };
  struct Stream {
    std::unordered_map<std::uint64_t, Block> blocks;
    // (parent external hash or root, local hash) → external hash, to walk queries.
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> edges;
    std::unordered_set<std::uint64_t> roots;
  };
  void remove_subtree(Stream& stream, std::uint64_t hash);

  std::map<WorkerWithDpRank, Stream> streams_;
};

}  // namespace kvidx::testing
