#include "bridge/vllm_event_converter.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <span>

#include "libcodec/mm_extra_info_codec.h"
#include "libindexer/hashing.h"

namespace kvidx::bridge {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::optional<StorageTier> storage_tier_of_medium(const std::optional<std::string>& medium) {
  if (!medium) return std::nullopt;
  const std::string m = lower(*medium);
  if (m.empty() || m == "gpu" || m == "cuda" || m == "device") return std::nullopt;
  if (m == "cpu" || m == "cpu_pinned" || m == "host" || m == "host_pinned") return StorageTier::host_pinned;
  if (m == "disk" || m == "ssd") return StorageTier::disk;
  return StorageTier::external;
}

std::optional<KvCacheStoreData> VllmEventConverter::convert_stored(const VllmBlockStored& stored) {
  if (stored.block_size != config_.block_size) {
    if (stats_.block_size_mismatches++ == 0) {
      spdlog::warn("bridge: worker {} sends block_size {} but --block-size is {}; such stored events are dropped",
                   config_.worker_id, stored.block_size, config_.block_size);
    }
    return std::nullopt;
  }
  std::string_view lora;
  if (stored.lora_name && !stored.lora_name->empty()) {
    lora = *stored.lora_name;
  } else if (stored.lora_id) {
    ++stats_.lora_id_without_name;
  }
  const bool eagle = config_.eagle || stored.bigram_token_ids;
  if (stored.bigram_token_ids && stats_.eagle_bigram_events++ == 0 && !config_.eagle) {
    spdlog::warn(
        "bridge: worker {} sends Eagle bigram token ids; hashing its blocks with Eagle windows (the "
        "router's queries must use Eagle hashing too)",
        config_.worker_id);
  }
  const BlockHashOptions options{block_hash_seed(lora, config_.cache_namespace), eagle, stored.block_mm_hashes};
  const std::vector<LocalBlockHash> locals = compute_block_hashes(stored.token_ids, config_.block_size, options);
  // Tokens in no hashed block (an Eagle window's lookahead token belongs to the next block).
  const std::size_t used = locals.size() * config_.block_size + (eagle && !locals.empty() ? 1 : 0);
  stats_.partial_tokens_dropped += stored.token_ids.size() - std::min(stored.token_ids.size(), used);
  if (locals.size() != stored.block_hashes.size()) ++stats_.block_count_mismatches;
  std::size_t n = std::min(locals.size(), stored.block_hashes.size());
  if (stored.extra_keys_issue && stored.extra_keys_issue->block < n) {
    if (stats_.extra_keys_unreadable++ < 10) {
      spdlog::warn("bridge: worker {}: stored event kept {} of {} blocks: {}", config_.worker_id,
                   stored.extra_keys_issue->block, n, stored.extra_keys_issue->reason);
    }
    n = stored.extra_keys_issue->block;
  }
  if (n == 0) {
    ++stats_.empty_stores_dropped;
    return std::nullopt;
  }
  KvCacheStoreData data;
  if (stored.parent_block_hash) data.parent_hash = ExternalSequenceBlockHash{*stored.parent_block_hash};
  data.blocks.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    data.blocks.push_back(StoredBlock{ExternalSequenceBlockHash{stored.block_hashes[i]}, locals[i]});
  }
  for (std::size_t i = 0; i < n && i < stored.block_mm_hashes.size(); ++i) {
    if (stored.block_mm_hashes[i].empty()) continue;
    data.set_mm_extra_info(i, encode_mm_extra_info(stored.block_mm_hashes[i]));
    ++stats_.mm_blocks;
  }
  stats_.blocks_stored += n;
  return data;
}

void VllmEventConverter::convert(const VllmEventBatch& batch, std::vector<RouterEvent>& out) {
  const DpRank rank = rank_of(batch);
  next_event_id_.try_emplace(rank, 0);
  for (const VllmEvent& event : batch.events) {
    RouterEvent r;
    r.worker_id = config_.worker_id;
    r.event.dp_rank = rank;
    if (const auto* stored = std::get_if<VllmBlockStored>(&event)) {
      auto data = convert_stored(*stored);
      if (!data) continue;
      r.event.data = std::move(*data);
      r.storage_tier = storage_tier_of_medium(stored->medium);
      ++stats_.stored;
    } else if (const auto* removed = std::get_if<VllmBlockRemoved>(&event)) {
      KvCacheRemoveData data;
      data.block_hashes.reserve(removed->block_hashes.size());
      for (std::uint64_t h : removed->block_hashes) data.block_hashes.push_back(ExternalSequenceBlockHash{h});
      r.event.data = std::move(data);
      r.storage_tier = storage_tier_of_medium(removed->medium);
      ++stats_.removed;
    } else {
      r.event.data = KvCacheClearData{};
      ++stats_.cleared;
    }
    r.event.event_id = next_id(rank);
    out.push_back(std::move(r));
  }
}

RouterEvent VllmEventConverter::make_cleared(DpRank rank) {
  RouterEvent r;
  r.worker_id = config_.worker_id;
  r.event.dp_rank = rank;
  r.event.data = KvCacheClearData{};
  r.event.event_id = next_id(rank);
  ++stats_.cleared;
  return r;
}

void VllmEventConverter::skip_event_ids(std::uint64_t count, DpRank fallback) {
  if (next_event_id_.empty()) next_event_id_.emplace(fallback, 0);
  for (auto& [rank, next] : next_event_id_) next += count;
  stats_.event_ids_skipped += count;
}

std::vector<DpRank> VllmEventConverter::known_ranks() const {
  std::vector<DpRank> out;
  for (const auto& [rank, next] : next_event_id_) out.push_back(rank);
  return out;
}

}  // namespace kvidx::bridge
