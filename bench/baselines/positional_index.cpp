#include "bench/baselines/positional_index.h"

#include <algorithm>
#include <map>
#include <utility>
#include <variant>

#include "libindexer/hashing.h"

namespace kvidx::bench {

PositionalIndex::Holders* PositionalIndex::Entry::find(std::uint64_t sequence) {
  return const_cast<Holders*>(std::as_const(*this).find(sequence));
}

const PositionalIndex::Holders* PositionalIndex::Entry::find(std::uint64_t sequence) const {
  if (empty()) return nullptr;
  if (first.sequence == sequence) return &first;
  const auto it = std::find_if(more.begin(), more.end(), [&](const Holders& h) { return h.sequence == sequence; });
  return it == more.end() ? nullptr : &*it;
}

PositionalIndex::Holders& PositionalIndex::Entry::add(std::uint64_t sequence) {
  if (Holders* found = find(sequence)) return *found;
  if (empty()) {
    first.sequence = sequence;
    return first;
  }
  return more.emplace_back(Holders{sequence, {}});
}

void PositionalIndex::Entry::drop_empty(Holders* holders) {
  if (!holders->streams.empty()) return;
  if (holders == &first) {
    if (more.empty()) return;  // the entry is now empty
    first = std::move(more.back());
    more.pop_back();
    return;
  }
  *holders = std::move(more.back());
  more.pop_back();
}

PositionalIndex::PositionalIndex(std::size_t jump) : jump_(std::max<std::size_t>(1, jump)) {}
PositionalIndex::~PositionalIndex() = default;

PositionalIndex::Shard& PositionalIndex::shard_of(const Key& key) const {
  // NOTE: the shard comes from the high bits, the map's bucket from the low ones.
  return shards_[(KeyHasher{}(key) >> 58) % kShards];
}

PositionalIndex::StreamBlocks& PositionalIndex::stream_blocks(WorkerWithDpRank stream) {
  std::lock_guard lock(streams_mutex_);
  auto& slot = streams_[stream];
  if (!slot) slot = std::make_unique<StreamBlocks>();
  return *slot;  // stable: entries are never erased
}

const PositionalIndex::StreamBlocks* PositionalIndex::find_stream_blocks(WorkerWithDpRank stream) const {
  std::lock_guard lock(streams_mutex_);
  const auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

void PositionalIndex::add_holder(const Held& held, WorkerWithDpRank stream) {
  const Key key{held.position, held.local};
  Shard& shard = shard_of(key);
  std::unique_lock lock(shard.mutex);
  shard.map[key].add(held.sequence).streams.push_back(stream);
}

void PositionalIndex::drop_holder(const Held& held, WorkerWithDpRank stream) {
  const Key key{held.position, held.local};
  Shard& shard = shard_of(key);
  std::unique_lock lock(shard.mutex);
  const auto found = shard.map.find(key);
  if (found == shard.map.end()) return;
  Entry& entry = found->second;
  Holders* holders = entry.find(held.sequence);
  if (holders == nullptr) return;
  const auto s = std::find(holders->streams.begin(), holders->streams.end(), stream);
  if (s != holders->streams.end()) {
    *s = holders->streams.back();
    holders->streams.pop_back();
  }
  entry.drop_empty(holders);
  if (entry.empty()) shard.map.erase(found);
}

bool PositionalIndex::apply_event(const RouterEvent& event) {
  const WorkerWithDpRank stream = event.stream();
  StreamBlocks& mine = stream_blocks(stream);
  if (const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data)) {
    std::uint64_t position = 0;
    std::optional<std::uint64_t> parent_sequence;
    if (stored->parent_hash) {
      const auto parent = mine.by_external.find(stored->parent_hash->value);
      if (parent == mine.by_external.end()) return false;
      position = parent->second.position + 1;
      parent_sequence = parent->second.sequence;
    }
    for (const StoredBlock& block : stored->blocks) {
      const std::uint64_t sequence =
          parent_sequence ? chain_sequence_hash(ExternalSequenceBlockHash{*parent_sequence}, block.tokens_hash).value
                          : block.tokens_hash.value;  // the chain's first hash is the first local hash
      const Held held{position, block.tokens_hash.value, sequence};
      if (mine.by_external.try_emplace(block.block_hash.value, held).second) {
        add_holder(held, stream);
        mine.count.store(mine.by_external.size(), std::memory_order_relaxed);
      }
      parent_sequence = sequence;
      ++position;
    }
    return true;
  }
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    bool all = true;
    for (const auto hash : removed->block_hashes) {
      const auto it = mine.by_external.find(hash.value);
      if (it == mine.by_external.end()) {
        all = false;
        continue;
      }
      drop_holder(it->second, stream);
      mine.by_external.erase(it);
    }
    mine.count.store(mine.by_external.size(), std::memory_order_relaxed);
    return all;
  }
  for (const auto& [external, held] : mine.by_external) drop_holder(held, stream);
  mine.by_external.clear();
  mine.count.store(0, std::memory_order_relaxed);
  return true;
}

std::size_t PositionalIndex::holders_at(std::size_t position, std::uint64_t local, std::uint64_t sequence,
                                        std::vector<WorkerWithDpRank>* out) const {
  const Key key{position, local};
  const Shard& shard = shard_of(key);
  std::shared_lock lock(shard.mutex);
  const auto found = shard.map.find(key);
  if (found == shard.map.end()) return 0;
  const Holders* h = found->second.find(sequence);
  if (h == nullptr) return 0;
  if (out != nullptr) *out = h->streams;
  return h->streams.size();
}

OverlapScores PositionalIndex::find_matches(std::span<const LocalBlockHash> query, bool early_exit) const {
  OverlapScores out;
  if (query.empty()) return out;
  const auto sequence = compute_sequence_hashes(query);
  const std::size_t n = query.size();
  std::vector<WorkerWithDpRank> active;
  if (holders_at(0, query[0].value, sequence[0].value, &active) == 0) return out;
  std::vector<WorkerWithDpRank> next;
  // Every stream in `active` holds positions [0, matched); those that drop out score `matched`.
  std::size_t matched = 1;
  auto drop_to = [&](std::size_t position, std::vector<WorkerWithDpRank>& survivors) {
    for (const auto w : active) {
      if (std::find(survivors.begin(), survivors.end(), w) == survivors.end()) {
        out.scores.append(w, static_cast<std::uint32_t>(position));
      }
    }
    active.swap(survivors);
  };
  out.frequencies.push_back(active.size());
  while (matched < n && !active.empty() && !(early_exit && active.size() == 1)) {
    const std::size_t probe = std::min(matched + jump_ - 1, n - 1);
    // NOTE: holdings are prefix-closed, so holders at `probe` are a subset of `active`: equal counts
    // mean every active stream holds the whole window and the scan can jump over it.
    if (holders_at(probe, query[probe].value, sequence[probe].value, nullptr) == active.size()) {
      out.frequencies.insert(out.frequencies.end(), probe + 1 - matched, active.size());
      matched = probe + 1;
      continue;
    }
    // Some stream drops out inside the window: counts only fall along the query, so a binary search
    // finds the first position where fewer streams hold it; everything before it is held by all.
    std::size_t lo = matched, hi = probe;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (holders_at(mid, query[mid].value, sequence[mid].value, nullptr) < active.size()) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    out.frequencies.insert(out.frequencies.end(), lo - matched, active.size());
    next.clear();
    holders_at(lo, query[lo].value, sequence[lo].value, &next);
    drop_to(lo, next);
    matched = lo;
    if (!active.empty()) {
      out.frequencies.push_back(active.size());
      matched = lo + 1;
    }
  }
  for (const auto w : active) out.scores.append(w, static_cast<std::uint32_t>(matched));
  for (const auto& [w, score] : out.scores) {
    const StreamBlocks* blocks = find_stream_blocks(w);
    out.tree_sizes.append(w, blocks == nullptr ? 0 : blocks->count.load(std::memory_order_relaxed));
  }
  return out;
}

std::vector<RouterEvent> PositionalIndex::dump_events() const {
  // Position by position, so a block's parent (position - 1, the chain's previous sequence hash) is
  // dumped before it; external hashes in the dump are the index's own sequence hashes.
  std::map<std::uint64_t, std::vector<std::pair<Key, Holders>>> by_position;
  for (const Shard& shard : shards_) {
    std::shared_lock lock(shard.mutex);
    for (const auto& [key, entry] : shard.map) {
      if (entry.empty()) continue;
      by_position[key.position].emplace_back(key, entry.first);
      for (const Holders& h : entry.more) by_position[key.position].emplace_back(key, h);
    }
  }
  // The parent of (position p, sequence s) is found from each stream's own reverse lookup.
  std::vector<RouterEvent> out;
  std::unordered_map<WorkerWithDpRank, std::unordered_map<std::uint64_t, std::uint64_t>, WorkerWithDpRankHasher>
      parent_of;  // stream -> sequence at p -> sequence at p - 1, built below
  {
    std::lock_guard lock(streams_mutex_);
    for (const auto& [stream, blocks] : streams_) {
      // Only lanes write by_external; dump is called after the harness's flush (no lane running).
      // A parent sits one position up with a sequence hash that chains to the child's.
      std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> sequences_at;
      for (const auto& [external, held] : blocks->by_external) sequences_at[held.position].push_back(held.sequence);
      auto& parents = parent_of[stream];
      for (const auto& [external, held] : blocks->by_external) {
        if (held.position == 0) continue;
        for (const auto seq : sequences_at[held.position - 1]) {
          if (chain_sequence_hash(ExternalSequenceBlockHash{seq}, LocalBlockHash{held.local}).value == held.sequence) {
            parents[held.sequence] = seq;
            break;
          }
        }
      }
    }
  }
  for (const auto& [position, blocks] : by_position) {
    for (const auto& [key, holders] : blocks) {
      for (const auto stream : holders.streams) {
        KvCacheStoreData data;
        if (position > 0) data.parent_hash = ExternalSequenceBlockHash{parent_of[stream][holders.sequence]};
        data.blocks.push_back(StoredBlock{ExternalSequenceBlockHash{holders.sequence}, LocalBlockHash{key.local}});
        out.push_back(
            RouterEvent{stream.worker_id, KvCacheEvent{out.size(), std::move(data), stream.dp_rank}, std::nullopt});
      }
    }
  }
  return out;
}

std::size_t PositionalIndex::block_count() const {
  std::size_t total = 0;
  for (const Shard& shard : shards_) {
    std::shared_lock lock(shard.mutex);
    for (const auto& [key, entry] : shard.map) total += entry.sequences();
  }
  return total;
}

}  // namespace kvidx::bench
