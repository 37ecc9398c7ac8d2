// Baseline 2 for the benchmarks: the flat index the simplest peers use — one hash map from a
// block's sequence (prefix-chained) hash to the set of streams holding it, plus each stream's
// block set for Cleared, behind one reader/writer lock. A query chains its local hashes into
// sequence hashes (that cost is part of its find_matches) and probes the map block by block.
// Benchmark-only code: not part of libindexer.
#pragma once

#include <cstddef>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx::bench {

class FlatHashIndex {
 public:
  bool apply_event(const RouterEvent& event);
  OverlapScores find_matches(std::span<const LocalBlockHash> query, bool early_exit = false) const;
  // One single-block Stored event per (block, holder); parents are named, order is the map's.
  std::vector<RouterEvent> dump_events() const;
  std::size_t block_count() const;

 private:
  struct Entry {
    std::vector<WorkerWithDpRank> holders;  // small: linear scans
    LocalBlockHash local;
    ExternalSequenceBlockHash parent;
    bool has_parent = false;
  };

  mutable std::shared_mutex mutex_;
  std::unordered_map<ExternalSequenceBlockHash, Entry> blocks_;
  std::unordered_map<WorkerWithDpRank, std::unordered_set<ExternalSequenceBlockHash>> per_stream_;
};

}  // namespace kvidx::bench
