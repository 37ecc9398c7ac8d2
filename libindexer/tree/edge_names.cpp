#include "libindexer/tree/edge_names.h"

#include <algorithm>
#include <utility>

#include "libindexer/tree/memory_accounting.h"

namespace kvidx {

std::size_t HolderNames::chunk_bytes() const {
  if (!entries_) return 0;
  // The vector object (its own allocation), its array, then each holder's names.
  std::size_t bytes =
      malloc_chunk_bytes(sizeof(std::vector<Entry>)) + malloc_chunk_bytes(entries_->capacity() * sizeof(Entry));
  for (const auto& entry : *entries_)
    bytes += malloc_chunk_bytes(entry.hashes.capacity() * sizeof(ExternalSequenceBlockHash));
  return bytes;
}

HolderNames::Entry* HolderNames::find(WorkerSlot slot) const {
  if (!entries_) return nullptr;
  auto it = std::lower_bound(entries_->begin(), entries_->end(), slot,
                             [](const Entry& e, WorkerSlot s) { return e.slot < s; });
  return (it != entries_->end() && it->slot == slot) ? &*it : nullptr;
}

ExternalSequenceBlockHash HolderNames::name_slow(WorkerSlot slot, std::uint32_t position,
                                                 std::span<const EdgeBlock> edge) const {
  const Entry* entry = find(slot);
  if (entry != nullptr && position < entry->hashes.size()) return entry->hashes[position];
  return edge[position].external;
}

void HolderNames::set(WorkerSlot slot, std::uint32_t position, ExternalSequenceBlockHash hash,
                      std::span<const EdgeBlock> edge) {
  Entry* entry = find(slot);
  if (entry == nullptr) {
    if (hash == edge[position].external) return;  // canonical: nothing to keep
    if (!entries_) entries_ = std::make_unique<std::vector<Entry>>();
    auto it = std::lower_bound(entries_->begin(), entries_->end(), slot,
                               [](const Entry& e, WorkerSlot s) { return e.slot < s; });
    entry = &*entries_->insert(it, Entry{slot, {}});
  }
  if (position < entry->hashes.size()) {
    entry->hashes[position] = hash;
    return;
  }
  if (hash == edge[position].external) return;  // past the entry means canonical already
  entry->hashes.reserve(edge.size());
  for (std::size_t p = entry->hashes.size(); p < position; ++p) entry->hashes.push_back(edge[p].external);
  entry->hashes.push_back(hash);
}

void HolderNames::drop_empty() {
  std::erase_if(*entries_, [](const Entry& e) { return e.hashes.empty(); });
  if (entries_->empty()) entries_.reset();
}

void HolderNames::truncate(WorkerSlot slot, std::uint32_t keep) {
  Entry* entry = find(slot);
  if (entry == nullptr || entry->hashes.size() <= keep) return;
  entry->hashes.resize(keep);
  if (keep == 0) {
    drop_empty();
  } else {
    entry->hashes.shrink_to_fit();
  }
}

HolderNames HolderNames::split_off(std::uint32_t keep) {
  HolderNames suffix;
  if (!entries_) return suffix;
  for (Entry& entry : *entries_) {
    if (entry.hashes.size() <= keep) continue;
    if (!suffix.entries_) suffix.entries_ = std::make_unique<std::vector<Entry>>();
    // NOTE: entries_ is sorted by slot, so the suffix's entries are appended in order.
    suffix.entries_->push_back(Entry{entry.slot, {entry.hashes.begin() + keep, entry.hashes.end()}});
    entry.hashes.resize(keep);
    entry.hashes.shrink_to_fit();
  }
  drop_empty();
  return suffix;
}

void HolderNames::append(HolderNames child, std::uint32_t offset, std::span<const EdgeBlock> edge) {
  if (!child.entries_) return;
  for (Entry& named : *child.entries_) {
    Entry* entry = find(named.slot);
    if (entry == nullptr) {
      if (!entries_) entries_ = std::make_unique<std::vector<Entry>>();
      auto it = std::lower_bound(entries_->begin(), entries_->end(), named.slot,
                                 [](const Entry& e, WorkerSlot s) { return e.slot < s; });
      entry = &*entries_->insert(it, Entry{named.slot, {}});
    }
    // Positions before `offset` the entry does not name yet use their canonical names.
    entry->hashes.reserve(offset + named.hashes.size());
    for (std::size_t p = entry->hashes.size(); p < offset; ++p) entry->hashes.push_back(edge[p].external);
    entry->hashes.insert(entry->hashes.end(), named.hashes.begin(), named.hashes.end());
  }
}

}  // namespace kvidx
