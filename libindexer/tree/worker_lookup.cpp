#include "libindexer/tree/worker_lookup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "libindexer/tree/linear_probing.h"
#include "libindexer/tree/memory_accounting.h"

namespace kvidx {

static_assert(sizeof(void*) == 8, "WorkerLookup packs a depth into a 64-bit pointer");
static_assert(alignof(RadixNode) >= 8, "WorkerLookup packs depth bits into a node pointer's low 3 bits");

WorkerLookup::PackedEntry WorkerLookup::PackedEntry::adopt(RadixNode* node, std::uint32_t depth) {
  const auto address = reinterpret_cast<std::uint64_t>(node);
  // NOTE: a pointer above 48 bits would lose its top bits; no supported platform hands out such
  // user-space addresses unless asked (mmap hints), so this is a broken build, not bad input.
  if ((address & ~kPointerMask) != 0) {
    std::fprintf(stderr, "kvidx: WorkerLookup: node address %p does not fit 48 bits\n", static_cast<void*>(node));
    std::abort();
  }
  PackedEntry out;
  out.word_ = address;  // the word owns the reference the caller handed over
  out.set_depth_bits(depth);
  return out;
}

WorkerLookup::PackedEntry WorkerLookup::PackedEntry::pack(const NodeRef& node, std::uint32_t depth) {
  return adopt(NodeRef(node).release(), depth);
}

void WorkerLookup::PackedEntry::release() {
  if (!holds()) {
    word_ = 0;  // free already, or a mark (which owns no reference)
    return;
  }
  const NodeRef owned = NodeRef::adopt(node());  // drops the packed reference when it goes out of scope
  word_ = 0;
}

WorkerLookup::WorkerLookup(WorkerLookup&& other) noexcept
    : slot(other.slot),
      buckets_(std::move(other.buckets_)),
      size_(std::exchange(other.size_, 0)),
      marks_(std::exchange(other.marks_, 0)),
      deep_depths_(std::move(other.deep_depths_)),
      found_(std::exchange(other.found_, LookupEntry{})) {
  other.buckets_.clear();
}

WorkerLookup& WorkerLookup::operator=(WorkerLookup&& other) noexcept {
  if (this == &other) return *this;
  release_all();
  slot = other.slot;
  buckets_ = std::move(other.buckets_);
  other.buckets_.clear();
  size_ = std::exchange(other.size_, 0);
  marks_ = std::exchange(other.marks_, 0);
  deep_depths_ = std::move(other.deep_depths_);
  found_ = std::exchange(other.found_, LookupEntry{});
  return *this;
}

WorkerLookup::~WorkerLookup() { release_all(); }

void WorkerLookup::release_all() {
  // NOTE: the buckets stay allocated and free: a stream that clears usually stores again at once.
  for (auto& bucket : buckets_) bucket.entry.release();
  reset_counts();
}

void WorkerLookup::reset_counts() {
  size_ = 0;
  marks_ = 0;
  deep_depths_.clear();
  found_ = LookupEntry{};
}

std::uint32_t WorkerLookup::depth_of(const Bucket& bucket) const {
  const std::uint32_t bits = bucket.entry.depth_bits();
  return bits == PackedEntry::kDeepDepth ? deep_depths_.at(bucket.key) : bits;
}

const LookupEntry& WorkerLookup::entry_of(const Bucket& bucket) const {
  found_.node = NodeRef(bucket.entry.node());
  found_.depth = depth_of(bucket);
  return found_;
}

std::uint32_t WorkerLookup::depth_bits_for(std::uint64_t key, std::uint32_t depth) {
  if (depth >= PackedEntry::kDeepDepth) {
    deep_depths_[key] = depth;
    return PackedEntry::kDeepDepth;
  }
  if (!deep_depths_.empty()) deep_depths_.erase(key);
  return depth;
}

void WorkerLookup::assign(Bucket& bucket, const NodeRef& node, std::uint32_t depth_bits) {
  if (!bucket.entry.empty() && bucket.entry.node() == node.get()) {
    bucket.entry.set_depth_bits(depth_bits);  // same node: no reference-count traffic
    return;
  }
  bucket.entry.release();
  bucket.entry = PackedEntry::pack(node, depth_bits);
}

const WorkerLookup::Bucket* WorkerLookup::bucket_of(ExternalSequenceBlockHash hash) const {
  if (size_ + marks_ == 0) return nullptr;
  const std::size_t mask = buckets_.size() - 1;
  for (std::size_t i = home(hash.value);; i = (i + 1) & mask) {
    const Bucket& bucket = buckets_[i];
    if (bucket.entry.empty()) return nullptr;
    if (bucket.key == hash.value) return &bucket;
  }
}

const LookupEntry* WorkerLookup::find(ExternalSequenceBlockHash hash) const {
  const Bucket* bucket = bucket_of(hash);
  return bucket == nullptr || !bucket->entry.holds() ? nullptr : &entry_of(*bucket);
}

std::optional<WorkerLookup::Peeked> WorkerLookup::peek(ExternalSequenceBlockHash hash) const {
  const Bucket* bucket = bucket_of(hash);
  if (bucket == nullptr || !bucket->entry.holds()) return std::nullopt;
  return Peeked{bucket->entry.node(), depth_of(*bucket)};
}

void WorkerLookup::rehash(std::size_t new_capacity) {
  // NOTE: buckets move as raw words: each packed reference (and each mark) moves with its bucket.
  std::vector<Bucket> old = std::exchange(buckets_, std::vector<Bucket>(new_capacity));
  const std::size_t mask = new_capacity - 1;
  for (const auto& bucket : old) {
    if (bucket.entry.empty()) continue;
    std::size_t i = home(bucket.key);
    while (!buckets_[i].entry.empty()) i = (i + 1) & mask;
    buckets_[i] = bucket;
  }
}

WorkerLookup::Bucket& WorkerLookup::bucket_for_insert(ExternalSequenceBlockHash hash) {
  // Keep the load factor (entries and marks) at or below 3/4 so probe runs stay short.
  if ((size_ + marks_ + 1) * 4 > buckets_.size() * 3) rehash(buckets_.empty() ? 16 : buckets_.size() * 2);
  const std::size_t mask = buckets_.size() - 1;
  for (std::size_t i = home(hash.value);; i = (i + 1) & mask) {
    Bucket& bucket = buckets_[i];
    if (bucket.entry.empty()) {
      // NOTE: counted now; the caller fills the entry before anything else reads this lookup.
      bucket.key = hash.value;
      ++size_;
      return bucket;
    }
    if (bucket.key == hash.value) {
      if (bucket.entry.is_mark()) {
        // Stored again: held, no longer dropped. NOTE: like a claimed bucket, filled by the caller.
        bucket.entry = PackedEntry{};
        --marks_;
        ++size_;
      }
      return bucket;
    }
  }
}

// NOTE (here and in insert_run): the depth bits first, then the bucket, which is filled at once:
// only those two steps allocate (and may throw), and neither then leaves a claimed bucket empty.
void WorkerLookup::insert_or_assign(ExternalSequenceBlockHash hash, const NodeRef& node, std::uint32_t depth) {
  const std::uint32_t bits = depth_bits_for(hash.value, depth);
  assign(bucket_for_insert(hash), node, bits);
}

void WorkerLookup::insert_run(std::span<const StoredBlock> blocks, const NodeRef& node, std::uint32_t first_depth) {
  // The references the new entries own, taken in one step when the run ends, however it ends
  // (an allocation failure part way): every entry that adopted `node` then has its reference.
  // NOTE: the caller's `node` keeps the node alive until then.
  struct TakeReferences {
    RadixNode* node;
    std::uint32_t count = 0;
    ~TakeReferences() {
      if (count > 0) NodeRef::acquire_many(node, count);
    }
  } taken{node.get()};
  ReleaseRun released;
  for (std::uint32_t i = 0; i < blocks.size(); ++i) {
    const std::uint32_t bits = depth_bits_for(blocks[i].block_hash.value, first_depth + i);
    Bucket& bucket = bucket_for_insert(blocks[i].block_hash);
    if (!bucket.entry.empty() && bucket.entry.node() == node.get()) {
      bucket.entry.set_depth_bits(bits);
      continue;
    }
    if (!bucket.entry.empty()) released.add(bucket.entry.take());
    bucket.entry = PackedEntry::adopt(node.get(), bits);
    ++taken.count;
  }
}

bool WorkerLookup::erase(ExternalSequenceBlockHash hash) {
  ReleaseRun released;
  return erase(hash, released);
}

void WorkerLookup::forget_all(std::span<const ExternalSequenceBlockHash> hashes) {
  ReleaseRun released;
  for (const auto hash : hashes) erase(hash, released);
}

void WorkerLookup::scrub_dropped(ExternalSequenceBlockHash hash) {
  Bucket* bucket = const_cast<Bucket*>(bucket_of(hash));  // NOTE: this lookup's own bucket
  if (bucket == nullptr || !bucket->entry.holds()) return;
  bucket->entry.release();
  bucket->entry = PackedEntry::mark();
  if (!deep_depths_.empty()) deep_depths_.erase(hash.value);
  --size_;
  ++marks_;
}

bool WorkerLookup::erase(ExternalSequenceBlockHash hash, ReleaseRun& released) {
  if (size_ + marks_ == 0) return false;
  const std::size_t mask = buckets_.size() - 1;
  std::size_t i = home(hash.value);
  while (true) {
    if (buckets_[i].entry.empty()) return false;
    if (buckets_[i].key == hash.value) break;
    i = (i + 1) & mask;
  }
  const bool was_entry = buckets_[i].entry.holds();
  if (was_entry) {
    released.add(buckets_[i].entry.take());
    if (!deep_depths_.empty()) deep_depths_.erase(hash.value);
    --size_;
  } else {
    buckets_[i].entry = PackedEntry{};  // a mark: no reference
    --marks_;
  }
  // NOTE: buckets move as raw words, their references with them.
  backward_shift_after_erase(
      i, mask, [&](std::size_t j) { return buckets_[j].entry.empty(); },
      [&](std::size_t j) { return home(buckets_[j].key); },
      [&](std::size_t from, std::size_t to) {
        buckets_[to] = buckets_[from];
        buckets_[from] = Bucket{};
      });
  return was_entry;
}

std::size_t WorkerLookup::chunk_bytes() const {
  return malloc_chunk_bytes(buckets_.capacity() * sizeof(Bucket)) +
         (deep_depths_.empty() ? 0
                               : hash_table_chunk_bytes(deep_depths_.size(), deep_depths_.bucket_count(),
                                                        sizeof(std::pair<std::uint64_t, std::uint32_t>)));
}

void WorkerLookup::clear() { release_all(); }

std::vector<NodeRef> WorkerLookup::take_nodes() {
  // References per node. A stream's entries lead to few nodes (one per run of blocks it stored),
  // so they are counted by a scan of the nodes seen so far; past kScanLimit nodes the rest are
  // appended and merged by sorting at the end.
  struct Count {
    RadixNode* node;
    std::uint32_t refs;
  };
  constexpr std::size_t kScanLimit = 32;
  // NOTE: both reserved before any reference leaves a bucket: nothing below allocates (or throws)
  // while references are in flight.
  std::vector<Count> counts;
  counts.reserve(size_);
  std::vector<NodeRef> nodes;
  nodes.reserve(size_);
  bool scanning = true;
  for (auto& bucket : buckets_) {
    if (!bucket.entry.holds()) {
      bucket.entry = PackedEntry{};  // free already, or a mark (which owns no reference)
      continue;
    }
    RadixNode* node = bucket.entry.take();  // NOTE: the reference comes along; the bucket is free
    Count* seen = nullptr;
    if (scanning) {
      for (auto& count : counts) {
        if (count.node == node) {
          seen = &count;
          break;
        }
      }
    }
    if (seen != nullptr) {
      ++seen->refs;
    } else {
      counts.push_back(Count{node, 1});
      scanning = counts.size() <= kScanLimit;
    }
  }
  reset_counts();  // every bucket was emptied above, in the same pass
  if (!scanning) {
    std::sort(counts.begin(), counts.end(), [](const Count& a, const Count& b) { return a.node < b.node; });
  }
  // Each node keeps one reference in `nodes`; the rest go in one step. Equal nodes are adjacent
  // here (sorted, or each seen once while scanning).
  for (std::size_t i = 0; i < counts.size();) {
    std::uint32_t refs = counts[i].refs;
    std::size_t j = i + 1;
    for (; j < counts.size() && counts[j].node == counts[i].node; ++j) refs += counts[j].refs;
    nodes.push_back(NodeRef::adopt(counts[i].node));
    if (refs > 1) NodeRef::release_many(counts[i].node, refs - 1);
    i = j;
  }
  return nodes;
}

}  // namespace kvidx
