#include "libindexer/tree/worker_lookup.h"

#include <utility>

namespace kvidx {

const LookupEntry* WorkerLookup::find(ExternalSequenceBlockHash hash) const {
  if (size_ == 0) return nullptr;
  const std::size_t mask = buckets_.size() - 1;
  for (std::size_t i = home(hash.value);; i = (i + 1) & mask) {
    const Bucket& bucket = buckets_[i];
    if (!bucket.entry.node) return nullptr;
    if (bucket.key == hash.value) return &bucket.entry;
  }
}

void WorkerLookup::rehash(std::size_t new_capacity) {
  std::vector<Bucket> old = std::exchange(buckets_, std::vector<Bucket>(new_capacity));
  const std::size_t mask = new_capacity - 1;
  for (auto& bucket : old) {
    if (!bucket.entry.node) continue;
    std::size_t i = home(bucket.key);
    while (buckets_[i].entry.node) i = (i + 1) & mask;
    buckets_[i] = std::move(bucket);
  }
}

void WorkerLookup::insert_or_assign(ExternalSequenceBlockHash hash, const NodeRef& node, std::uint32_t depth) {
  // Keep the load factor at or below 3/4 so probe runs stay short.
  if (!dropped_.empty()) dropped_.erase(hash.value);  // stored again: held, no longer dropped
  if ((size_ + 1) * 4 > buckets_.size() * 3) rehash(buckets_.empty() ? 16 : buckets_.size() * 2);
  const std::size_t mask = buckets_.size() - 1;
  for (std::size_t i = home(hash.value);; i = (i + 1) & mask) {
    Bucket& bucket = buckets_[i];
    if (!bucket.entry.node) {
      bucket.key = hash.value;
      bucket.entry = LookupEntry{node, depth};
      ++size_;
      return;
    }
    if (bucket.key == hash.value) {
      if (bucket.entry.node != node) bucket.entry.node = node;
      bucket.entry.depth = depth;
      return;
    }
  }
}

bool WorkerLookup::erase(ExternalSequenceBlockHash hash) {
  if (size_ == 0) return false;
  const std::size_t mask = buckets_.size() - 1;
  std::size_t i = home(hash.value);
  while (true) {
    if (!buckets_[i].entry.node) return false;
    if (buckets_[i].key == hash.value) break;
    i = (i + 1) & mask;
  }
  // Backward-shift deletion: pull later entries of the probe run into the hole so lookups never
  // need tombstones.
  std::size_t hole = i;
  for (std::size_t j = (i + 1) & mask; buckets_[j].entry.node; j = (j + 1) & mask) {
    const std::size_t want = home(buckets_[j].key);
    // Move j into the hole unless its home lies cyclically in (hole, j].
    const bool home_after_hole = hole <= j ? (want > hole && want <= j) : (want > hole || want <= j);
    if (!home_after_hole) {
      buckets_[hole] = std::move(buckets_[j]);
      hole = j;
    }
  }
  buckets_[hole].entry = LookupEntry{};
  --size_;
  return true;
}

void WorkerLookup::clear() {
  buckets_.clear();
  size_ = 0;
  dropped_.clear();
}

}  // namespace kvidx
