// WorkerLookup: one stream's index from external block hash to the node that held the block when
// it was stored, plus the block's depth. It is owned by the caller's lane (never shared between
// threads). Entries go stale when another stream's split moves a block into a suffix node; the
// tree repairs them when used (the node's continuation leads to the block, the depth pins its
// position). Open addressing with linear probing: no allocation per entry. A bucket is 12 bytes:
// the key, and one word naming the node by its slot in this stream's node table and the block by
// its offset from the node's first depth. A stream's entries lead to few nodes (one per run of
// blocks it stored lands on one node), so the table is small, and it holds one reference per node
// however many entries lead there: re-storing held blocks touches no shared reference count.
// The rare entry that does not fit goes to a side map: an offset past 13 bits (deep_depths_), a
// node past the table's 2^19 - 3 slots (spilled_).
//
// Besides the entries it remembers the blocks a cut dropped whose entries the cut scrubbed before
// the stream named them ("dropped" marks: a bucket keeping its key with a mark instead of a node). Whether a dropped
// block's entry is scrubbed (it shared the cut node's edge) or left stale (it sat on a node below) depends on where
// other streams' splits put node boundaries; "has an entry or a dropped mark" does not: it holds exactly the blocks the
// stream stored and has not since named in a Removed, cleared, or named as the parent of a rejected Stored. Removed
// results are decided on that, so they follow the stream's own history only (ConcurrentRadixTree::apply_removed).
#pragma once

#include <cstdint>
#include <cstring>
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
  // `depth` counts from the root; the node holds the block (depth >= the node's start depth) or
  // did when the caller found it. A depth the word cannot hold goes to the side map.
  void insert_or_assign(ExternalSequenceBlockHash hash, const NodeRef& node, std::uint32_t depth);
  // insert_or_assign of a run of blocks at consecutive depths of one node (a Stored's blocks on one
  // edge): the node's slot is found once for the run.
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
  // the reference the lookup held on it.
  std::vector<NodeRef> take_nodes();

  // A cut dropped the block: its entry becomes a dropped mark, which stays until the stream names it.
  void scrub_dropped(ExternalSequenceBlockHash hash);
  bool was_dropped(ExternalSequenceBlockHash hash) const {
    const Bucket* bucket = bucket_of(hash);
    return bucket != nullptr && bucket->is_mark();
  }
  // The stream named these blocks (a Removed): entries and marks go.
  void forget_all(std::span<const ExternalSequenceBlockHash> hashes);
  std::size_t dropped_size() const { return marks_; }
  // Nodes the entries lead to through the node table (the spilled ones not counted).
  std::size_t node_count() const { return node_slots_.size() - free_slots_; }
  // Heap bytes of the buckets (entries and dropped marks), the node table and the side maps, as
  // malloc chunks (memory_accounting.h).
  std::size_t chunk_bytes() const;

  template <typename Visit>  // Visit(ExternalSequenceBlockHash, const LookupEntry&)
  void for_each(Visit&& visit) const {
    for (const auto& bucket : buckets_) {
      if (bucket.holds()) visit(ExternalSequenceBlockHash{bucket.key()}, entry_of(bucket));
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
  friend class RadixTreeTestPeer;  // lowers max_node_slots_ to reach the spill path in tests

  // A bucket's word: the node slot in the top 19 bits, the offset in the low 13. Slot 0 (with the
  // whole word 0) is a free bucket; the top two slot values mark a dropped block and a spilled entry.
  static constexpr unsigned kOffsetBits = 13;
  static constexpr std::uint32_t kDeepOffset = (1u << kOffsetBits) - 1;  // the depth is in deep_depths_
  static constexpr std::uint32_t kMarkSlot = (1u << (32 - kOffsetBits)) - 1;
  static constexpr std::uint32_t kSpillSlot = kMarkSlot - 1;  // node and depth are in spilled_
  static constexpr std::uint32_t kMaxNodeSlots = kSpillSlot - 1;
  static constexpr std::uint32_t word_of(std::uint32_t node_slot, std::uint32_t offset) {
    return (node_slot << kOffsetBits) | offset;
  }
  static constexpr std::uint32_t slot_in(std::uint32_t word) { return word >> kOffsetBits; }
  // The word names a node slot (an entry neither spilled nor a mark).
  static constexpr bool in_table(std::uint32_t word) { return word != 0 && slot_in(word) < kSpillSlot; }
  static constexpr bool is_deep(std::uint32_t word) { return in_table(word) && (word & kDeepOffset) == kDeepOffset; }

  // NOTE: 4-byte aligned so an array packs at 12 bytes; the key is read with one unaligned load.
  struct Bucket {
    std::uint32_t key_words[2] = {0, 0};
    std::uint32_t word = 0;
    std::uint64_t key() const {
      std::uint64_t key;
      std::memcpy(&key, key_words, sizeof key);
      return key;
    }
    void set_key(std::uint64_t key) { std::memcpy(key_words, &key, sizeof key); }
    bool empty() const { return word == 0; }
    bool is_mark() const { return slot_in(word) == kMarkSlot; }
    bool holds() const { return word != 0 && slot_in(word) != kMarkSlot; }
  };
  static_assert(sizeof(Bucket) == 12);

  // A node the stream's entries lead to. Invariant: a slot in use (uses > 0) owns one reference to
  // its node and is in node_index_; a free slot owns none and links the free list.
  struct NodeSlot {
    RadixNode* node = nullptr;
    std::uint32_t uses = 0;         // buckets naming this slot
    std::uint32_t start_depth = 0;  // the node's (offsets count from it); for a free slot, the next free one
  };

  const Bucket* bucket_of(ExternalSequenceBlockHash hash) const;  // entry or mark; null when absent
  // Grows the buckets if one more claim would pass 3/4 full (allocates; call before claim_bucket).
  void make_room();
  // The key's bucket, claimed if it was free (counted as an entry, filled by the caller at once);
  // a mark there is lifted (the block is held again). Never allocates.
  Bucket& claim_bucket(std::uint64_t key);
  // The slot of `node`, made (taking its reference) if missing: 0 when the table is full.
  std::uint32_t claim_node_slot(RadixNode* node);
  // Frees `node_slot` if no bucket names it (a slot claimed for entries that never went in).
  void free_if_unused(std::uint32_t node_slot);
  // The word for an entry of `key` leading to `node` (through `node_slot`, 0: spilled) at `depth`,
  // with the side maps updated for it. May allocate; changes no bucket.
  std::uint32_t prepare_word(std::uint64_t key, RadixNode* node, std::uint32_t node_slot, std::uint32_t depth);
  // Puts a prepared word into `bucket` and lets go of what the bucket held before. Never allocates.
  void place(Bucket& bucket, std::uint32_t word);
  // Lets go of what `old_word` held for `key` (its slot's use, its side-map records) once
  // `new_word` (0: nothing) took its place: records the new word rewrote stay.
  void release_word(std::uint64_t key, std::uint32_t old_word, std::uint32_t new_word);
  void drop_use(std::uint32_t node_slot);  // the last use frees the slot and drops its reference
  void release_node_slot(std::uint32_t node_slot);
  std::uint32_t find_node_slot(const RadixNode* node) const;  // 0: none
  // The slot of `node` if the entry of `key` leads to it through the table (0: no such entry).
  std::uint32_t slot_if_leads_to(std::uint64_t key, const RadixNode* node) const;
  // Whether the entry of `key` already leads through `node_slot` to `depth` (an in-word offset).
  bool holds_word(std::uint64_t key, std::uint32_t node_slot, std::uint32_t depth) const;
  void index_node_slot(std::uint32_t node_slot);  // enters a slot in use into node_index_ (which has room)
  // Frees a node slot claimed for entries that never went in (an allocation failed part way).
  struct UnusedSlotGuard {
    WorkerLookup& lookup;
    std::uint32_t node_slot;
    ~UnusedSlotGuard() { lookup.free_if_unused(node_slot); }
  };
  std::uint32_t depth_of(const Bucket& bucket) const;  // from the offset, the side map or the spill
  RadixNode* node_of(const Bucket& bucket) const;
  const LookupEntry& entry_of(const Bucket& bucket) const;
  void release_all();
  // Empties every table without letting go of the slots' references (the caller did, or handed
  // them over): what an empty lookup holds.
  void reset();

  static std::size_t mix(std::uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<std::size_t>(key);
  }
  std::size_t home(std::uint64_t key) const { return mix(key) & (buckets_.size() - 1); }
  std::size_t node_home(const RadixNode* node) const {
    return mix(reinterpret_cast<std::uintptr_t>(node)) & (node_index_.size() - 1);
  }
  void prefetch_key(std::uint64_t key) const { prefetch_line(&buckets_[home(key)]); }
  void rehash(std::size_t new_capacity);
  void rehash_node_index(std::size_t new_capacity);
  void erase_from_node_index(std::uint32_t node_slot);

  std::vector<Bucket> buckets_;
  std::size_t size_ = 0;                   // buckets holding entries
  std::size_t marks_ = 0;                  // buckets holding dropped marks
  std::vector<NodeSlot> node_slots_;       // slot s at node_slots_[s - 1]
  std::vector<std::uint32_t> node_index_;  // node -> slot: open addressing, at most 1/2 full
  std::uint32_t free_head_ = 0;            // first free slot (0: none)
  std::uint32_t free_slots_ = 0;
  std::uint32_t max_node_slots_ = kMaxNodeSlots;
  std::unordered_map<std::uint64_t, std::uint32_t> deep_depths_;  // key -> depth, for offsets >= kDeepOffset
  std::unordered_map<std::uint64_t, LookupEntry> spilled_;        // key -> entry, past the node table's slots
  mutable LookupEntry found_;                                     // what find() and for_each() hand out
};

// The per-lane map of every stream's lookup that ConcurrentRadixTree::apply_event works on.
using DirectLookup = std::unordered_map<WorkerWithDpRank, WorkerLookup, WorkerWithDpRankHasher>;

// Starts loading the buckets `event` will touch in its stream's lookup (a Stored's parent and
// blocks, a Removed's hashes; nothing for a stream the map does not hold yet). A lane calls it for
// the event after the one it is about to apply: each bucket is a cache miss (random keys), and the
// prefetch at the start of apply_stored comes too late to hide them behind the short tree walk.
void prefetch_event_buckets(const DirectLookup& lookup, const RouterEvent& event);

}  // namespace kvidx
