#include "bench/baselines/flat_hash_index.h"

#include <algorithm>
#include <mutex>
#include <variant>

#include "libindexer/hashing.h"

namespace kvidx::bench {
namespace {

void drop_holder(std::vector<WorkerWithDpRank>& holders, WorkerWithDpRank stream) {
  const auto it = std::find(holders.begin(), holders.end(), stream);
  if (it != holders.end()) {
    *it = holders.back();
    holders.pop_back();
  }
}

}  // namespace

std::size_t FlatHashIndex::block_count() const {
  std::shared_lock lock(mutex_);
  return blocks_.size();
}

bool FlatHashIndex::apply_event(const RouterEvent& event) {
  std::unique_lock lock(mutex_);
  const WorkerWithDpRank stream = event.stream();
  if (const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data)) {
    auto& mine = per_stream_[stream];
    std::optional<ExternalSequenceBlockHash> parent = stored->parent_hash;
    for (const StoredBlock& block : stored->blocks) {
      Entry& entry = blocks_[block.block_hash];
      if (entry.holders.empty()) {
        entry.local = block.tokens_hash;
        entry.has_parent = parent.has_value();
        entry.parent = parent.value_or(ExternalSequenceBlockHash{});
      }
      if (mine.insert(block.block_hash).second) entry.holders.push_back(stream);
      parent = block.block_hash;
    }
    return true;
  }
  auto found = per_stream_.find(stream);
  if (found == per_stream_.end()) return std::holds_alternative<KvCacheClearData>(event.event.data);
  auto release = [&](ExternalSequenceBlockHash hash) {
    const auto it = blocks_.find(hash);
    if (it == blocks_.end()) return;
    drop_holder(it->second.holders, stream);
    if (it->second.holders.empty()) blocks_.erase(it);
  };
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    bool all = true;
    for (const auto hash : removed->block_hashes) {
      if (found->second.erase(hash) == 0) {
        all = false;
        continue;
      }
      release(hash);
    }
    return all;
  }
  for (const auto hash : found->second) release(hash);
  per_stream_.erase(found);
  return true;
}

OverlapScores FlatHashIndex::find_matches(std::span<const LocalBlockHash> query, bool early_exit) const {
  OverlapScores out;
  if (query.empty()) return out;
  const auto sequence = compute_sequence_hashes(query);
  std::vector<WorkerWithDpRank> active;
  std::unordered_map<WorkerWithDpRank, std::uint32_t, WorkerWithDpRankHasher> scores;
  std::shared_lock lock(mutex_);
  for (std::size_t depth = 0; depth < sequence.size(); ++depth) {
    const auto it = blocks_.find(sequence[depth]);
    if (it == blocks_.end()) break;
    const auto& holders = it->second.holders;
    if (depth == 0) {
      active = holders;
    } else {
      std::erase_if(active,
                    [&](WorkerWithDpRank w) { return std::find(holders.begin(), holders.end(), w) == holders.end(); });
    }
    if (active.empty()) break;
    for (const auto w : active) scores[w] = static_cast<std::uint32_t>(depth + 1);
    out.frequencies.push_back(active.size());
    if (early_exit && active.size() == 1) break;
  }
  for (const auto& [stream, score] : scores) {
    out.scores.append(stream, score);
    const auto it = per_stream_.find(stream);
    out.tree_sizes.append(stream, it == per_stream_.end() ? 0 : it->second.size());
  }
  return out;
}

std::vector<RouterEvent> FlatHashIndex::dump_events() const {
  std::shared_lock lock(mutex_);
  std::vector<RouterEvent> out;
  for (const auto& [hash, entry] : blocks_) {
    for (const auto holder : entry.holders) {
      KvCacheStoreData data;
      if (entry.has_parent) data.parent_hash = entry.parent;
      data.blocks.push_back(StoredBlock{hash, entry.local});
      out.push_back(
          RouterEvent{holder.worker_id, KvCacheEvent{out.size(), std::move(data), holder.dp_rank}, std::nullopt});
    }
  }
  return out;
}

}  // namespace kvidx::bench
