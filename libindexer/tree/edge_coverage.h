// EdgeCoverage: which (worker, rank) slots hold a node's edge, and how many of its leading blocks.
// A slot covers the edge fully when its count equals the edge length, otherwise only a leading
// prefix (partial coverage). Entries are kept sorted by slot so lookups are a binary search and
// two sorted sets can be merged. Up to 11 entries live inline, in the node's own cache lines (an
// array of its own was a second cache miss after the node's on every query that scores a body
// held by a handful of streams); larger sets spill to one heap array, so the number of streams is
// not bounded.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

namespace kvidx {

// Dense id the tree gives each (worker, rank) stream; see WorkerRegistry.
using WorkerSlot = std::uint32_t;

struct CoverageEntry {
  WorkerSlot slot = 0;
  std::uint32_t covered = 0;  // leading edge blocks held; always > 0 for a stored entry
};

class EdgeCoverage {
 public:
  EdgeCoverage() = default;
  EdgeCoverage(EdgeCoverage&& other) noexcept;
  EdgeCoverage& operator=(EdgeCoverage&& other) noexcept;
  EdgeCoverage(const EdgeCoverage&) = delete;
  EdgeCoverage& operator=(const EdgeCoverage&) = delete;
  ~EdgeCoverage() = default;

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const CoverageEntry> entries() const { return {data(), size_}; }
  // Bytes of the spilled array (0 while the entries fit inline).
  std::size_t heap_bytes() const { return heap_ ? capacity_ * sizeof(CoverageEntry) : 0; }

  // Blocks `slot` holds on this edge; 0 when it holds none.
  std::uint32_t covered(WorkerSlot slot) const;
  // Sets the held count of `slot` (0 removes it) and returns the previous count.
  std::uint32_t set(WorkerSlot slot, std::uint32_t covered);
  void clear() { size_ = 0; }

  // Splits the edge after `keep` blocks: this coverage is clipped to `keep` and the returned one
  // holds, for every slot that reached past `keep`, the count of blocks it holds beyond it.
  EdgeCoverage split_off(std::uint32_t keep);

 private:
  // NOTE: 11 entries (88 bytes) fill RadixNode to four cache lines (radix_node.h); the count and
  // the array pointer come first, so they share the node's first line with its lock.
  static constexpr std::uint32_t kInlineCapacity = 11;

  CoverageEntry* data() { return heap_ ? heap_.get() : inline_.data(); }
  const CoverageEntry* data() const { return heap_ ? heap_.get() : inline_.data(); }
  std::uint32_t lower_bound(WorkerSlot slot) const;
  void grow();
  void push_back(CoverageEntry entry);

  std::unique_ptr<CoverageEntry[]> heap_;
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = kInlineCapacity;
  std::array<CoverageEntry, kInlineCapacity> inline_{};
};

}  // namespace kvidx
