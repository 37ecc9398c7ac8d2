// WorkerLookup: one stream's index from external block hash to the node that held the block when
// it was stored, plus the block's depth. It is owned by the caller's lane (never shared between
// threads). Entries go stale when another stream's split moves a block into a suffix node; the
// tree repairs them when used (the node's continuation leads to the block, the depth pins its
// position). Open addressing with linear probing: no allocation per entry. A bucket is 16 bytes:
// the key, and the node pointer with the depth packed into the bits a pointer leaves unused (see
// PackedEntry); the rare entry that does not fit (depth >= 2^19) keeps its depth in a side map.
//
// Besides the entries it remembers the blocks a cut dropped whose entries the cut scrubbed before
// the stream named them ("dropped" marks: a bucket keeping its key with a mark instead of a node). Whether a dropped
// block's entry is scrubbed (it shared the cut node's edge) or left stale (it sat on a node below) depends on where
// other streams' splits put node boundaries; "has an entry or a dropped mark" does not: it holds exactly the blocks the
// stream stored and has not since named in a Removed, cleared, or named as the parent of a rejected Stored. Removed
// results are decided on that, so they follow the stream's own history only (ConcurrentRadixTree::apply_removed).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "libindexer/protocol.h"
#include "libindexer/tree/cache_prefetch.h"
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

  // The entry for `hash`, or null. NOTE: the pointee is a copy held by this lookup, valid until the
  // next call on it; callers copy what they keep.
  const LookupEntry* find(ExternalSequenceBlockHash hash) const;
  // The entry for `hash` without taking a node reference: `node` stays valid while the entry does
  // (until the next call that changes this lookup).
  struct Peeked {
    RadixNode* node = nullptr;
    std::uint32_t depth = 0;
  };
  std::optional<Peeked> peek(ExternalSequenceBlockHash hash) const;
  // NOTE: takes the node by reference and copies it only when the entry changes: re-storing a held
  // block then costs no reference-count traffic on a node other lanes are touching too.
  void insert_or_assign(ExternalSequenceBlockHash hash, const NodeRef& node, std::uint32_t depth);
  // insert_or_assign of a run of blocks at consecutive depths of one node (a Stored's blocks on one
  // edge): the references the new entries own are taken in one step, not one per block.
  void insert_run(std::span<const StoredBlock> blocks, const NodeRef& node, std::uint32_t first_depth);
  // Starts loading the home buckets of these keys (at most kPrefetchLimit) into the cache: an
  // event's keys are random, so each bucket is a cache miss; touched together they overlap (and
  // overlap the tree walk the caller does before it inserts or erases them).
  static constexpr std::size_t kPrefetchLimit = 64;
  void prefetch(std::span<const StoredBlock> blocks) const {
    if (buckets_.empty()) return;
    for (std::size_t i = 0; i < blocks.size() && i < kPrefetchLimit; ++i) prefetch_key(blocks[i].block_hash.value);
  }
  void prefetch(std::span<const ExternalSequenceBlockHash> hashes) const {
    if (buckets_.empty()) return;
    for (std::size_t i = 0; i < hashes.size() && i < kPrefetchLimit; ++i) prefetch_key(hashes[i].value);
  }
  void prefetch(ExternalSequenceBlockHash hash) const {
    if (!buckets_.empty()) prefetch_key(hash.value);
  }
  // Erases the entry or dropped mark of `hash`; true when it was an entry.
  bool erase(ExternalSequenceBlockHash hash);
  // Entries and dropped marks go; the buckets stay allocated (a cleared stream usually stores again).
  void clear();
  // Empties the lookup like clear() and hands over the nodes its entries led to, each once, with
  // one of the references the entries held (the others are dropped in one step per node).
  std::vector<NodeRef> take_nodes();

  // A cut dropped the block: its entry becomes a dropped mark, which stays until the stream names it.
  void scrub_dropped(ExternalSequenceBlockHash hash);
  bool was_dropped(ExternalSequenceBlockHash hash) const {
    const Bucket* bucket = bucket_of(hash);
    return bucket != nullptr && bucket->entry.is_mark();
  }
  // The stream named these blocks (a Removed): entries and marks go; the references of entries of
  // one node are dropped in one step.
  void forget_all(std::span<const ExternalSequenceBlockHash> hashes);
  std::size_t dropped_size() const { return marks_; }
  // Heap bytes of the buckets (entries and dropped marks) and deep depths, as malloc chunks
  // (memory_accounting.h).
  std::size_t chunk_bytes() const;

  template <typename Visit>  // Visit(ExternalSequenceBlockHash, const LookupEntry&)
  void for_each(Visit&& visit) const {
    for (const auto& bucket : buckets_) {
      if (bucket.entry.holds()) visit(ExternalSequenceBlockHash{bucket.key}, entry_of(bucket));
    }
  }

  WorkerLookup() = default;
  WorkerLookup(WorkerLookup&& other) noexcept;
  WorkerLookup& operator=(WorkerLookup&& other) noexcept;
  WorkerLookup(const WorkerLookup&) = delete;
  WorkerLookup& operator=(const WorkerLookup&) = delete;
  ~WorkerLookup();

  // The stream's slot in the tree's registry, cached on first use.
  std::optional<WorkerSlot> slot;

 private:
  // A node pointer and a depth in one word. Invariant: a non-empty PackedEntry owns one reference
  // to its node (taken by pack, dropped by release), like a NodeRef. x86-64 and AArch64 user-space
  // pointers fit in 48 bits and RadixNode is at least 8-aligned, so the top 16 and low 3 bits are
  // free: the depth goes there, kDeepDepth marking a depth kept in the side map. A dropped mark is
  // the one non-zero word without pointer bits; it owns no reference.
  class PackedEntry {
   public:
    static constexpr std::uint32_t kDeepDepth = (1u << 19) - 1;
    bool empty() const { return word_ == 0; }                   // a free bucket
    bool is_mark() const { return word_ == kMarkWord; }         // a dropped mark
    bool holds() const { return (word_ & kPointerMask) != 0; }  // an entry leading to a node
    static PackedEntry mark() {
      PackedEntry out;
      out.word_ = kMarkWord;
      return out;
    }
    RadixNode* node() const { return reinterpret_cast<RadixNode*>(word_ & kPointerMask); }
    std::uint32_t depth_bits() const { return static_cast<std::uint32_t>(((word_ >> 48) << 3) | (word_ & kLowMask)); }
    // Takes a reference to `node`; `depth` must be <= kDeepDepth.
    static PackedEntry pack(const NodeRef& node, std::uint32_t depth);
    // Packs `node` without taking a reference: the caller hands over one it took (NodeRef::acquire_many).
    static PackedEntry adopt(RadixNode* node, std::uint32_t depth);
    void release();  // drops the reference; empty afterwards
    // Empties the entry and hands its reference to the caller (who drops it, e.g. via ReleaseRun).
    RadixNode* take() { return reinterpret_cast<RadixNode*>(std::exchange(word_, 0) & kPointerMask); }
    void set_depth_bits(std::uint32_t depth) {
      word_ = (word_ & kPointerMask) | (std::uint64_t{depth >> 3} << 48) | (depth & kLowMask);
    }

   private:
    static constexpr std::uint64_t kLowMask = 0x7;
    static constexpr std::uint64_t kPointerMask = 0x0000'FFFF'FFFF'FFF8ULL;
    static constexpr std::uint64_t kMarkWord = 1;
    std::uint64_t word_ = 0;
  };
  struct Bucket {
    std::uint64_t key = 0;
    PackedEntry entry;  // empty: a free bucket; a mark: the key's block was dropped
  };
  static_assert(sizeof(Bucket) == 16);

  // References handed over by take(), dropped together while they name the same node.
  class ReleaseRun {
   public:
    ReleaseRun() = default;
    ReleaseRun(const ReleaseRun&) = delete;
    ReleaseRun& operator=(const ReleaseRun&) = delete;
    ~ReleaseRun() { flush(); }
    void add(RadixNode* node) {
      if (node != node_) flush();
      node_ = node;
      ++count_;
    }
    void flush() {
      if (count_ > 0) NodeRef::release_many(node_, count_);
      node_ = nullptr;
      count_ = 0;
    }

   private:
    RadixNode* node_ = nullptr;
    std::uint32_t count_ = 0;
  };

  const Bucket* bucket_of(ExternalSequenceBlockHash hash) const;  // entry or mark; null when absent
  bool erase(ExternalSequenceBlockHash hash, ReleaseRun& released);
  // The key's bucket, claimed if it was free; a mark there is lifted (the block is held again), so
  // the entry is empty or holds a node.
  Bucket& bucket_for_insert(ExternalSequenceBlockHash hash);
  // The depth bits to pack for `key` at `depth`, keeping the side map of deep depths in step.
  std::uint32_t depth_bits_for(std::uint64_t key, std::uint32_t depth);
  std::uint32_t depth_of(const Bucket& bucket) const;  // from the packed bits or the side map
  const LookupEntry& entry_of(const Bucket& bucket) const;
  void assign(Bucket& bucket, const NodeRef& node, std::uint32_t depth_bits);
  void release_all();
  void reset_counts();  // size, marks, deep depths and the last find: what an empty lookup holds

  static std::size_t mix(std::uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<std::size_t>(key);
  }
  std::size_t home(std::uint64_t key) const { return mix(key) & (buckets_.size() - 1); }
  void prefetch_key(std::uint64_t key) const { prefetch_line(&buckets_[home(key)]); }
  void rehash(std::size_t new_capacity);

  std::vector<Bucket> buckets_;
  std::size_t size_ = 0;                                          // buckets holding entries
  std::size_t marks_ = 0;                                         // buckets holding dropped marks
  std::unordered_map<std::uint64_t, std::uint32_t> deep_depths_;  // key -> depth, for depths >= kDeepDepth
  mutable LookupEntry found_;                                     // what find() and for_each() hand out
};

// The per-lane map of every stream's lookup that ConcurrentRadixTree::apply_event works on.
using DirectLookup = std::unordered_map<WorkerWithDpRank, WorkerLookup, WorkerWithDpRankHasher>;

}  // namespace kvidx
