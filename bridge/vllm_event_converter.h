// VllmEventConverter: turns decoded vLLM batches into RouterEvents for one engine (worker).
//
// Per engine event, at most one RouterEvent, in batch order:
//  - BlockStored -> stored: `block_hash` = the engine's external hash as given (normalised to u64,
//    see vllm_event_batch.h); `tokens_hash` = Dynamo-compatible local hash of each FULL block of
//    `token_ids` (XXH3-64 over u32 LE tokens), seeded with block_hash_seed(lora_name), so LoRA
//    blocks are salted exactly as the router salts its queries. Blocks = min(#block_hashes,
//    #full token blocks); a trailing partial block is dropped. `parent_hash` = parent_block_hash.
//    An event whose block_size differs from the configured one is dropped and counted (its token
//    blocks would never match the router's queries); one with no full block is dropped too.
//    `lora_id` without `lora_name` cannot be salted (the name is the seed): counted, unsalted.
//    Eagle (config.eagle, or an event whose token ids came as bigrams): block i hashes tokens
//    [i*B, i*B + B + 1), so a block needs the next block's first token; an event carrying exactly
//    its blocks' tokens (vLLM) therefore loses its last block (counted as a block count mismatch),
//    while bigram events carry the extra token. Multimodal blocks: each block's mm hashes from
//    extra_keys go into its hash (libindexer/hashing.h BlockHashOptions). When extra_keys has a
//    shape the decoder does not know, only the blocks before that block are kept (counted and
//    logged): the later ones cannot be hashed as the router would.
//  - BlockRemoved -> removed with the external hashes. AllBlocksCleared -> cleared.
//  - `medium` -> storage_tier: nil/"GPU"/"cuda"/"device" = device (left unset on the wire),
//    "CPU"/"cpu_pinned"/"host" = host_pinned, "DISK"/"ssd" = disk, anything else = external.
//  - dp_rank: the batch's data_parallel_rank, else the configured default rank.
//
// Event ids (how they stay monotonic per (worker, rank)): each (worker, rank) stream has a
// counter starting at 0 when the converter is created; every emitted RouterEvent takes the next
// value, in engine sequence order (the bridge hands batches over strictly in seq order, replayed
// ones included). Ids are therefore contiguous while nothing is lost. When batches are lost for
// good (a gap that replay could not fill, an undecodable payload), the bridge calls skip_event_ids
// with the number of lost batches (each vLLM batch holds at least one event), so kvidx's
// StreamSequencer sees a gap of at least that size instead of silently continuing. A restarted
// bridge starts again at 0, which kvidx treats as a publisher restart (clear, then apply): the
// safe choice, since the blocks stored while the bridge was down are unknown.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bridge/vllm_event_batch.h"
#include "libindexer/protocol.h"

namespace kvidx::bridge {

struct ConversionConfig {
  WorkerId worker_id = 0;
  DpRank default_dp_rank = 0;  // used when a batch carries no data_parallel_rank
  std::uint32_t block_size = 16;
  std::string cache_namespace;  // optional extra salt, as block_hash_seed's second argument
  bool eagle = false;           // Eagle hash windows for every stored event (bigram events always)
};

struct ConversionStats {
  std::uint64_t stored = 0;
  std::uint64_t removed = 0;
  std::uint64_t cleared = 0;
  std::uint64_t blocks_stored = 0;
  std::uint64_t partial_tokens_dropped = 0;  // tokens of trailing partial blocks
  std::uint64_t block_count_mismatches = 0;  // #block_hashes != #full token blocks
  std::uint64_t block_size_mismatches = 0;   // stored events dropped: wrong block_size
  std::uint64_t empty_stores_dropped = 0;    // stored events without a full block
  std::uint64_t lora_id_without_name = 0;    // stored unsalted: lora_id but no lora_name
  std::uint64_t event_ids_skipped = 0;       // ids skipped to signal lost batches
  std::uint64_t eagle_bigram_events = 0;     // stored events with bigram token ids (Eagle)
  std::uint64_t mm_blocks = 0;               // blocks hashed with multimodal hashes
  std::uint64_t extra_keys_unreadable = 0;   // stored events cut short by unknown extra_keys shapes
};

class VllmEventConverter {
 public:
  explicit VllmEventConverter(ConversionConfig config) : config_(std::move(config)) {}

  // The stream rank a batch belongs to.
  DpRank rank_of(const VllmEventBatch& batch) const {
    return batch.data_parallel_rank.value_or(config_.default_dp_rank);
  }
  // Appends the batch's RouterEvents to `out`.
  void convert(const VllmEventBatch& batch, std::vector<RouterEvent>& out);
  // A synthetic `cleared` for one stream (engine restart, re-sync after a gap), with the next id.
  RouterEvent make_cleared(DpRank rank);
  // Lost batches: advances every known stream's id (or `fallback`'s when none is known yet).
  void skip_event_ids(std::uint64_t count, DpRank fallback);
  // Ranks seen so far (streams with a counter), ascending.
  std::vector<DpRank> known_ranks() const;

  const ConversionStats& stats() const { return stats_; }
  const ConversionConfig& config() const { return config_; }

 private:
  std::uint64_t next_id(DpRank rank) { return next_event_id_[rank]++; }
  std::optional<KvCacheStoreData> convert_stored(const VllmBlockStored& stored);

  ConversionConfig config_;
  std::map<DpRank, std::uint64_t> next_event_id_;
  ConversionStats stats_;
};

// Storage tier of a vLLM `medium`; nullopt means device (the wire default).
std::optional<StorageTier> storage_tier_of_medium(const std::optional<std::string>& medium);

}  // namespace kvidx::bridge
