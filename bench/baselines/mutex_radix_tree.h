// Baseline 1 for the benchmarks: a plain, non-compressed radix tree (one node per block, hash-map
// children, hash-set of holders) behind one global mutex, with a per-stream external-hash lookup.
// It mirrors the first-generation kv-router RadixTree: every operation, reads included, takes the
// same lock. Benchmark-only code: it is not part of libindexer and is not used by the service.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx::bench {

class MutexRadixTree {
 public:
  MutexRadixTree();
  ~MutexRadixTree();
  MutexRadixTree(const MutexRadixTree&) = delete;
  MutexRadixTree& operator=(const MutexRadixTree&) = delete;

  // Returns false when the event could not be applied (unknown parent or removed block).
  bool apply_event(const RouterEvent& event);
  OverlapScores find_matches(std::span<const LocalBlockHash> query, bool early_exit = false) const;
  // One single-block Stored event per (node, holder), breadth first (parents before children).
  std::vector<RouterEvent> dump_events() const;
  std::size_t node_count() const;

 private:
  struct Node {
    Node* parent = nullptr;
    LocalBlockHash local;
    ExternalSequenceBlockHash external;
    std::unordered_map<LocalBlockHash, std::unique_ptr<Node>> children;
    std::unordered_set<WorkerWithDpRank> holders;
  };
  using Lookup = std::unordered_map<ExternalSequenceBlockHash, Node*>;

  bool store_locked(WorkerWithDpRank stream, const KvCacheStoreData& data);
  bool remove_locked(WorkerWithDpRank stream, std::span<const ExternalSequenceBlockHash> hashes);
  void clear_locked(WorkerWithDpRank stream);
  void release_locked(Node* node, WorkerWithDpRank stream);  // drops a holder, prunes empty leaves

  mutable std::mutex mutex_;
  std::unique_ptr<Node> root_;
  std::unordered_map<WorkerWithDpRank, Lookup> lookups_;
  std::size_t nodes_ = 0;
};

}  // namespace kvidx::bench
