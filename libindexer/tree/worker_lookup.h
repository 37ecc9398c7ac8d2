// WorkerLookup: one stream's index from external block hash to the node that held the block when
// it was stored, plus the block's depth. It is owned by the caller's lane (never shared between
// threads). Entries go stale when another stream's split moves a block into a suffix node; the
// tree repairs them when used (the node's continuation leads to the block, the depth pins its
// position). Open addressing with linear probing: no allocation per entry.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "libindexer/protocol.h"
#include "libindexer/tree/edge_coverage.h"
#include "libindexer/tree/radix_node.h"

namespace kvidx {

struct LookupEntry {
  NodeRef node;
  std::uint32_t depth = 0;  // blocks above this one on its path from the root
};

class WorkerLookup {
 public:
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  const LookupEntry* find(ExternalSequenceBlockHash hash) const;
  // NOTE: takes the node by reference and copies it only when the entry changes: re-storing a held
  // block then costs no reference-count traffic on a node other lanes are touching too.
  void insert_or_assign(ExternalSequenceBlockHash hash, const NodeRef& node, std::uint32_t depth);
  bool erase(ExternalSequenceBlockHash hash);
  void clear();

  template <typename Visit>  // Visit(ExternalSequenceBlockHash, const LookupEntry&)
  void for_each(Visit&& visit) const {
    for (const auto& bucket : buckets_) {
      if (bucket.entry.node) visit(ExternalSequenceBlockHash{bucket.key}, bucket.entry);
    }
  }

  // The stream's slot in the tree's registry, cached on first use.
  std::optional<WorkerSlot> slot;

 private:
  struct Bucket {
    std::uint64_t key = 0;
    LookupEntry entry;  // an empty node marks a free bucket
  };

  static std::size_t mix(std::uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<std::size_t>(key);
  }
  std::size_t home(std::uint64_t key) const { return mix(key) & (buckets_.size() - 1); }
  void rehash(std::size_t new_capacity);

  std::vector<Bucket> buckets_;
  std::size_t size_ = 0;
};

// The per-lane map of every stream's lookup that ConcurrentRadixTree::apply_event works on.
using DirectLookup = std::unordered_map<WorkerWithDpRank, WorkerLookup, WorkerWithDpRankHasher>;

}  // namespace kvidx
