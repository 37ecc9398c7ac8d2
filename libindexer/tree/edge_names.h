// Edge block names: a block of the tree is identified by its local hash on its path from the root;
// its external hash is per-(worker, rank) naming. Engines that do not share a hash seed (vLLM
// without PYTHONHASHSEED, SGLang, TensorRT-LLM, a restarted engine) call the same block by
// different external hashes, so every lookup by external hash (parent of a Stored, Removed, dump)
// must use the name the asking stream gave the block.
//
// EdgeBlock keeps one canonical name per block (the name of the stream that created it). HolderNames
// keeps, per node, the names of the streams that call the edge's blocks otherwise. A fleet whose
// engines share hashes pays one null pointer per node; an entry costs 8 bytes per block it names.
//
// Invariant (kept by the tree under the node's lock): a slot's entry names at most the blocks the
// slot holds on the edge (hashes.size() <= its coverage), so a cut truncates it and a drop erases it;
// positions past the entry use the canonical name.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "libindexer/protocol.h"
#include "libindexer/tree/edge_coverage.h"

namespace kvidx {

struct EdgeBlock {
  LocalBlockHash local;
  ExternalSequenceBlockHash external;  // canonical name: the creating stream's; others may differ
};

class HolderNames {
 public:
  HolderNames() = default;
  HolderNames(HolderNames&&) noexcept = default;
  HolderNames& operator=(HolderNames&&) noexcept = default;
  HolderNames(const HolderNames&) = delete;
  HolderNames& operator=(const HolderNames&) = delete;
  ~HolderNames() = default;

  // The name `slot` gives the block at `position` of `edge`.
  ExternalSequenceBlockHash name(WorkerSlot slot, std::uint32_t position, std::span<const EdgeBlock> edge) const {
    if (!entries_) return edge[position].external;  // NOTE: the shared-hash fast path
    return name_slow(slot, position, edge);
  }
  // Records that `slot` calls the block at `position` `hash`; positions before it that the entry
  // does not name yet are filled with their canonical names.
  void set(WorkerSlot slot, std::uint32_t position, ExternalSequenceBlockHash hash, std::span<const EdgeBlock> edge);
  // `slot` now holds only the first `keep` blocks (0 erases its entry).
  void truncate(WorkerSlot slot, std::uint32_t keep);
  void clear() { entries_.reset(); }
  // The edge splits after `keep` blocks: returns the names of the blocks past `keep` (positions
  // renumbered from 0) and keeps the first `keep` here.
  HolderNames split_off(std::uint32_t keep);
  // The inverse of split_off: the edge (already `edge`) was joined with a child's edge that now
  // starts at `offset`; `child` holds the child's names (positions from 0). Only a slot that holds
  // every block before `offset` may have names in `child` (the caller's merge condition).
  void append(HolderNames child, std::uint32_t offset, std::span<const EdgeBlock> edge);

  bool empty() const { return !entries_; }
  // Heap bytes of the names, as malloc chunks (memory_accounting.h).
  std::size_t chunk_bytes() const;
  std::size_t slots_named() const { return entries_ ? entries_->size() : 0; }

 private:
  struct Entry {
    WorkerSlot slot = 0;
    std::vector<ExternalSequenceBlockHash> hashes;  // names of positions [0, hashes.size())
  };

  ExternalSequenceBlockHash name_slow(WorkerSlot slot, std::uint32_t position, std::span<const EdgeBlock> edge) const;
  Entry* find(WorkerSlot slot) const;
  void drop_empty();

  // Sorted by slot; null when every holder uses the canonical names.
  std::unique_ptr<std::vector<Entry>> entries_;
};

}  // namespace kvidx
