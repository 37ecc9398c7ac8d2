#include "libindexer/tree/worker_lookup.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "libindexer/tree/linear_probing.h"
#include "libindexer/tree/memory_accounting.h"

namespace kvidx {

WorkerLookup::WorkerLookup(WorkerLookup&& other) noexcept
    : slot(other.slot),
      buckets_(std::exchange(other.buckets_, {})),
      size_(std::exchange(other.size_, 0)),
      marks_(std::exchange(other.marks_, 0)),
      node_slots_(std::exchange(other.node_slots_, {})),
      node_index_(std::exchange(other.node_index_, {})),
      free_head_(std::exchange(other.free_head_, 0)),
      free_slots_(std::exchange(other.free_slots_, 0)),
      max_node_slots_(other.max_node_slots_),
      deep_depths_(std::move(other.deep_depths_)),
      spilled_(std::move(other.spilled_)),
      found_(std::exchange(other.found_, LookupEntry{})) {
  other.deep_depths_.clear();
  other.spilled_.clear();
}

WorkerLookup& WorkerLookup::operator=(WorkerLookup&& other) noexcept {
  if (this == &other) return *this;
  release_all();
  slot = other.slot;
  buckets_ = std::exchange(other.buckets_, {});
  size_ = std::exchange(other.size_, 0);
  marks_ = std::exchange(other.marks_, 0);
  node_slots_ = std::exchange(other.node_slots_, {});
  node_index_ = std::exchange(other.node_index_, {});
  free_head_ = std::exchange(other.free_head_, 0);
  free_slots_ = std::exchange(other.free_slots_, 0);
  max_node_slots_ = other.max_node_slots_;
  deep_depths_ = std::move(other.deep_depths_);
  other.deep_depths_.clear();
  spilled_ = std::move(other.spilled_);
  other.spilled_.clear();
  found_ = std::exchange(other.found_, LookupEntry{});
  return *this;
}

WorkerLookup::~WorkerLookup() { release_all(); }

void WorkerLookup::release_all() {
  for (const auto& node_slot : node_slots_) {
    if (node_slot.node != nullptr) NodeRef::release_many(node_slot.node, 1);
  }
  reset();  // the spilled entries' references go with spilled_
}

void WorkerLookup::reset() {
  node_slots_.clear();
  std::fill(node_index_.begin(), node_index_.end(), 0);
  free_head_ = 0;
  free_slots_ = 0;
  // NOTE: the buckets stay allocated and free: a stream that clears usually stores again at once.
  std::fill(buckets_.begin(), buckets_.end(), Bucket{});
  size_ = 0;
  marks_ = 0;
  deep_depths_.clear();
  spilled_.clear();
  found_ = LookupEntry{};
}

std::uint32_t WorkerLookup::depth_of(const Bucket& bucket) const {
  if (!in_table(bucket.word)) return spilled_.at(bucket.key()).depth;
  if (is_deep(bucket.word)) return deep_depths_.at(bucket.key());
  return node_slots_[slot_in(bucket.word) - 1].start_depth + (bucket.word & kDeepOffset);
}

RadixNode* WorkerLookup::node_of(const Bucket& bucket) const {
  return in_table(bucket.word) ? node_slots_[slot_in(bucket.word) - 1].node : spilled_.at(bucket.key()).node.get();
}

const LookupEntry& WorkerLookup::entry_of(const Bucket& bucket) const {
  found_.node = NodeRef(node_of(bucket));
  found_.depth = depth_of(bucket);
  return found_;
}

const WorkerLookup::Bucket* WorkerLookup::bucket_of(ExternalSequenceBlockHash hash) const {
  if (size_ + marks_ == 0) return nullptr;
  const std::size_t mask = buckets_.size() - 1;
  for (std::size_t i = home(hash.value);; i = (i + 1) & mask) {
    const Bucket& bucket = buckets_[i];
    if (bucket.empty()) return nullptr;
    if (bucket.key() == hash.value) return &bucket;
  }
}

const LookupEntry* WorkerLookup::find(ExternalSequenceBlockHash hash) const {
  const Bucket* bucket = bucket_of(hash);
  return bucket == nullptr || !bucket->holds() ? nullptr : &entry_of(*bucket);
}

std::optional<WorkerLookup::Peeked> WorkerLookup::peek(ExternalSequenceBlockHash hash) const {
  const Bucket* bucket = bucket_of(hash);
  if (bucket == nullptr || !bucket->holds()) return std::nullopt;
  return Peeked{node_of(*bucket), depth_of(*bucket)};
}

void WorkerLookup::rehash(std::size_t new_capacity) {
  // NOTE: buckets move as raw words: slot uses and side-map records name keys, not positions.
  std::vector<Bucket> old = std::exchange(buckets_, std::vector<Bucket>(new_capacity));
  const std::size_t mask = new_capacity - 1;
  for (const auto& bucket : old) {
    if (bucket.empty()) continue;
    std::size_t i = home(bucket.key());
    while (!buckets_[i].empty()) i = (i + 1) & mask;
    buckets_[i] = bucket;
  }
}

void WorkerLookup::make_room() {
  // Keep the load factor (entries and marks) at or below 3/4 so probe runs stay short.
  if ((size_ + marks_ + 1) * 4 > buckets_.size() * 3) rehash(buckets_.empty() ? 16 : buckets_.size() * 2);
}

WorkerLookup::Bucket& WorkerLookup::claim_bucket(std::uint64_t key) {
  const std::size_t mask = buckets_.size() - 1;
  for (std::size_t i = home(key);; i = (i + 1) & mask) {
    Bucket& bucket = buckets_[i];
    if (bucket.empty()) {
      // NOTE: counted now; the caller fills the word before anything else reads this lookup.
      bucket.set_key(key);
      ++size_;
      return bucket;
    }
    if (bucket.key() == key) {
      if (bucket.is_mark()) {
        // Stored again: held, no longer dropped. NOTE: like a claimed bucket, filled by the caller.
        bucket.word = 0;
        --marks_;
        ++size_;
      }
      return bucket;
    }
  }
}

std::uint32_t WorkerLookup::find_node_slot(const RadixNode* node) const {
  if (node_index_.empty()) return 0;
  const std::size_t mask = node_index_.size() - 1;
  for (std::size_t i = node_home(node); node_index_[i] != 0; i = (i + 1) & mask) {
    if (node_slots_[node_index_[i] - 1].node == node) return node_index_[i];
  }
  return 0;
}

void WorkerLookup::rehash_node_index(std::size_t new_capacity) {
  node_index_.assign(new_capacity, 0);
  for (std::uint32_t s = 1; s <= node_slots_.size(); ++s) {
    if (node_slots_[s - 1].node != nullptr) index_node_slot(s);  // skips free slots
  }
}

void WorkerLookup::index_node_slot(std::uint32_t node_slot) {
  const std::size_t mask = node_index_.size() - 1;
  std::size_t i = node_home(node_slots_[node_slot - 1].node);
  while (node_index_[i] != 0) i = (i + 1) & mask;
  node_index_[i] = node_slot;
}

std::uint32_t WorkerLookup::claim_node_slot(RadixNode* node) {
  if (const std::uint32_t found = find_node_slot(node); found != 0) return found;
  const std::size_t live = node_count();
  if (live >= max_node_slots_) return 0;  // the entry spills
  // NOTE: what allocates comes first; the reference is taken last, when nothing can throw.
  if ((live + 1) * 2 > node_index_.size()) rehash_node_index(node_index_.empty() ? 8 : node_index_.size() * 2);
  std::uint32_t claimed = free_head_;
  if (claimed != 0) {
    free_head_ = node_slots_[claimed - 1].start_depth;
    --free_slots_;
  } else {
    node_slots_.emplace_back();
    claimed = static_cast<std::uint32_t>(node_slots_.size());
  }
  node_slots_[claimed - 1] = NodeSlot{node, 0, node->start_depth()};
  index_node_slot(claimed);
  NodeRef::acquire_many(node, 1);
  return claimed;
}

void WorkerLookup::free_if_unused(std::uint32_t node_slot) {
  if (node_slot != 0 && node_slots_[node_slot - 1].uses == 0) release_node_slot(node_slot);
}

void WorkerLookup::drop_use(std::uint32_t node_slot) {
  if (--node_slots_[node_slot - 1].uses == 0) release_node_slot(node_slot);
}

void WorkerLookup::release_node_slot(std::uint32_t node_slot) {
  RadixNode* node = node_slots_[node_slot - 1].node;
  const std::size_t mask = node_index_.size() - 1;
  std::size_t hole = node_home(node);
  while (node_index_[hole] != node_slot) hole = (hole + 1) & mask;
  node_index_[hole] = 0;
  backward_shift_after_erase(
      hole, mask, [&](std::size_t j) { return node_index_[j] == 0; },
      [&](std::size_t j) { return node_home(node_slots_[node_index_[j] - 1].node); },
      [&](std::size_t from, std::size_t to) { node_index_[to] = std::exchange(node_index_[from], 0); });
  node_slots_[node_slot - 1] = NodeSlot{nullptr, 0, free_head_};
  free_head_ = node_slot;
  ++free_slots_;
  NodeRef::release_many(node, 1);  // NOTE: last: the node may go with it
}

std::uint32_t WorkerLookup::prepare_word(std::uint64_t key, RadixNode* node, std::uint32_t node_slot,
                                         std::uint32_t depth) {
  if (node_slot == 0) {
    spilled_.insert_or_assign(key, LookupEntry{NodeRef(node), depth});
    return word_of(kSpillSlot, 0);
  }
  const std::uint32_t start = node_slots_[node_slot - 1].start_depth;
  if (depth >= start && depth - start < kDeepOffset) return word_of(node_slot, depth - start);
  deep_depths_.insert_or_assign(key, depth);
  return word_of(node_slot, kDeepOffset);
}

void WorkerLookup::place(Bucket& bucket, std::uint32_t word) {
  // NOTE: the new use is counted before the old one goes, so re-storing on the same node never
  // frees its slot on the way.
  if (in_table(word)) ++node_slots_[slot_in(word) - 1].uses;
  const std::uint32_t old = std::exchange(bucket.word, word);
  if (old != 0) release_word(bucket.key(), old, word);
}

void WorkerLookup::release_word(std::uint64_t key, std::uint32_t old_word, std::uint32_t new_word) {
  if (is_deep(old_word) && !is_deep(new_word)) deep_depths_.erase(key);
  if (in_table(old_word)) {
    drop_use(slot_in(old_word));
  } else if (slot_in(old_word) == kSpillSlot && slot_in(new_word) != kSpillSlot) {
    spilled_.erase(key);
  }
}

// NOTE (here and in insert_run): every step that allocates (the buckets' growth, a new node slot,
// a side-map record) comes before the bucket is claimed, which is then filled at once.
void WorkerLookup::insert_or_assign(ExternalSequenceBlockHash hash, const NodeRef& node, std::uint32_t depth) {
  make_room();
  const UnusedSlotGuard guard{*this, claim_node_slot(node.get())};
  const std::uint32_t word = prepare_word(hash.value, node.get(), guard.node_slot, depth);
  place(claim_bucket(hash.value), word);
}

std::uint32_t WorkerLookup::slot_if_leads_to(std::uint64_t key, const RadixNode* node) const {
  const Bucket* bucket = bucket_of(ExternalSequenceBlockHash{key});
  if (bucket == nullptr || !in_table(bucket->word)) return 0;
  const std::uint32_t node_slot = slot_in(bucket->word);
  return node_slots_[node_slot - 1].node == node ? node_slot : 0;
}

bool WorkerLookup::holds_word(std::uint64_t key, std::uint32_t node_slot, std::uint32_t depth) const {
  const std::uint32_t start = node_slots_[node_slot - 1].start_depth;
  if (depth < start || depth - start >= kDeepOffset) return false;  // side-map depths take the slow path
  const Bucket* bucket = bucket_of(ExternalSequenceBlockHash{key});
  return bucket != nullptr && bucket->word == word_of(node_slot, depth - start);
}

void WorkerLookup::insert_run(std::span<const StoredBlock> blocks, const NodeRef& node, std::uint32_t first_depth) {
  if (blocks.empty()) return;
  // A re-stored run usually leads here already: the first block's bucket names the node's slot
  // (no node-index probe, which is two cache misses), and then a bucket already holding the word
  // it would get is left alone (placing it again would change nothing). When the first block's
  // entry is absent or leads elsewhere (a fresh run), every block is placed as before.
  const std::uint32_t hinted = slot_if_leads_to(blocks[0].block_hash.value, node.get());
  const UnusedSlotGuard guard{*this, hinted != 0 ? hinted : claim_node_slot(node.get())};
  for (std::uint32_t i = 0; i < blocks.size(); ++i) {
    const std::uint64_t key = blocks[i].block_hash.value;
    if (hinted != 0 && holds_word(key, hinted, first_depth + i)) continue;
    make_room();
    const std::uint32_t word = prepare_word(key, node.get(), guard.node_slot, first_depth + i);
    place(claim_bucket(key), word);
  }
}

bool WorkerLookup::erase(ExternalSequenceBlockHash hash) {
  const Bucket* found = bucket_of(hash);
  if (found == nullptr) return false;
  const std::size_t i = static_cast<std::size_t>(found - buckets_.data());
  const std::size_t mask = buckets_.size() - 1;
  const std::uint32_t word = std::exchange(buckets_[i].word, 0);
  const bool was_entry = slot_in(word) != kMarkSlot;
  if (was_entry) {
    --size_;
    release_word(hash.value, word, 0);
  } else {
    --marks_;  // a mark: nothing else to let go of
  }
  backward_shift_after_erase(
      i, mask, [&](std::size_t j) { return buckets_[j].empty(); },
      [&](std::size_t j) { return home(buckets_[j].key()); },
      [&](std::size_t from, std::size_t to) { buckets_[to] = std::exchange(buckets_[from], Bucket{}); });
  return was_entry;
}

void WorkerLookup::forget_all(std::span<const ExternalSequenceBlockHash> hashes) {
  for (const auto hash : hashes) erase(hash);
}

void WorkerLookup::scrub_dropped(ExternalSequenceBlockHash hash) {
  Bucket* bucket = const_cast<Bucket*>(bucket_of(hash));  // NOTE: this lookup's own bucket
  if (bucket == nullptr || !bucket->holds()) return;
  const std::uint32_t word = std::exchange(bucket->word, word_of(kMarkSlot, 0));
  --size_;
  ++marks_;
  release_word(hash.value, word, 0);
}

std::size_t WorkerLookup::chunk_bytes() const {
  return malloc_chunk_bytes(buckets_.capacity() * sizeof(Bucket)) +
         malloc_chunk_bytes(node_slots_.capacity() * sizeof(NodeSlot)) +
         malloc_chunk_bytes(node_index_.capacity() * sizeof(std::uint32_t)) +
         (deep_depths_.empty() ? 0
                               : hash_table_chunk_bytes(deep_depths_.size(), deep_depths_.bucket_count(),
                                                        sizeof(std::pair<std::uint64_t, std::uint32_t>))) +
         (spilled_.empty() ? 0
                           : hash_table_chunk_bytes(spilled_.size(), spilled_.bucket_count(),
                                                    sizeof(std::pair<std::uint64_t, LookupEntry>)));
}

void WorkerLookup::clear() { release_all(); }

std::vector<NodeRef> WorkerLookup::take_nodes() {
  // NOTE: both vectors are filled before anything is released, and nothing below them allocates.
  std::vector<RadixNode*> spilled_nodes;  // nodes only spilled entries lead to, each once
  spilled_nodes.reserve(spilled_.size());
  for (const auto& [key, entry] : spilled_) {
    if (find_node_slot(entry.node.get()) == 0) spilled_nodes.push_back(entry.node.get());
  }
  std::sort(spilled_nodes.begin(), spilled_nodes.end());
  spilled_nodes.erase(std::unique(spilled_nodes.begin(), spilled_nodes.end()), spilled_nodes.end());
  std::vector<NodeRef> nodes;
  nodes.reserve(node_count() + spilled_nodes.size());
  for (const auto& node_slot : node_slots_) {
    if (node_slot.node != nullptr) nodes.push_back(NodeRef::adopt(node_slot.node));  // the slot's reference
  }
  for (RadixNode* node : spilled_nodes) nodes.push_back(NodeRef(node));
  reset();  // spilled_'s references go; `nodes` holds one on each of their nodes
  return nodes;
}

void prefetch_event_buckets(const DirectLookup& lookup, const RouterEvent& event) {
  if (kind_of(event.event.data) == EventKind::cleared) return;
  const auto it = lookup.find(event.stream());
  if (it == lookup.end()) return;
  const WorkerLookup& stream_lookup = it->second;
  if (const auto* store = std::get_if<KvCacheStoreData>(&event.event.data)) {
    if (store->parent_hash) stream_lookup.prefetch(*store->parent_hash);
    stream_lookup.prefetch(store->blocks);
  } else {
    stream_lookup.prefetch(std::get<KvCacheRemoveData>(event.event.data).block_hashes);
  }
}

}  // namespace kvidx
