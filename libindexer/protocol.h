// Protocol types shared by every kvidx layer: who holds a block, how blocks are named, and the
// RouterEvent that workers publish. Plain value types: no JSON, no NATS, no I/O.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "libindexer/flat_map.h"

namespace kvidx {

using WorkerId = std::uint64_t;
using DpRank = std::uint32_t;

// One publisher stream: a worker's data-parallel rank. Scores and ownership are per stream.
struct WorkerWithDpRank {
  WorkerId worker_id = 0;
  DpRank dp_rank = 0;

  friend auto operator<=>(const WorkerWithDpRank&, const WorkerWithDpRank&) = default;
};

// Hash of one block's token ids only; the tree is keyed by it and queries are made of it.
struct LocalBlockHash {
  std::uint64_t value = 0;
  friend auto operator<=>(const LocalBlockHash&, const LocalBlockHash&) = default;
};

// The engine's own id for a block; it commits to the whole prefix, so the same local hash at two
// depths has two external hashes. Events name blocks (parent, removal) by it.
struct ExternalSequenceBlockHash {
  std::uint64_t value = 0;
  friend auto operator<=>(const ExternalSequenceBlockHash&, const ExternalSequenceBlockHash&) = default;
};

// Two hashes, trivially copied: a block's rare multimodal metadata is kept beside the blocks
// (KvCacheStoreData::mm_extra_infos), so decoding, queueing and freeing a Stored moves 16 bytes a
// block, not the 56 of an optional string in each.
struct StoredBlock {
  ExternalSequenceBlockHash block_hash;
  LocalBlockHash tokens_hash;

  friend bool operator==(const StoredBlock&, const StoredBlock&) = default;
};

struct KvCacheStoreData {
  std::optional<ExternalSequenceBlockHash> parent_hash;  // absent: the chain starts at the root
  std::optional<std::uint32_t> start_position;
  std::vector<StoredBlock> blocks;
  // Multimodal metadata of blocks[i] as raw JSON text; carried through encode/decode, ignored by
  // the tree. Invariant (kept by set_mm_extra_info and every decoder): empty when no block has
  // any, else exactly one entry per block, so equal events compare equal.
  std::vector<std::optional<std::string>> mm_extra_infos;

  // blocks[block]'s metadata, or nullptr.
  const std::string* mm_extra_info(std::size_t block) const {
    return block < mm_extra_infos.size() && mm_extra_infos[block] ? &*mm_extra_infos[block] : nullptr;
  }
  // Sets blocks[block]'s metadata (block < blocks.size()).
  void set_mm_extra_info(std::size_t block, std::string info) {
    if (mm_extra_infos.empty()) mm_extra_infos.resize(blocks.size());
    mm_extra_infos[block] = std::move(info);
  }

  friend bool operator==(const KvCacheStoreData&, const KvCacheStoreData&) = default;
};

struct KvCacheRemoveData {
  std::vector<ExternalSequenceBlockHash> block_hashes;
  friend bool operator==(const KvCacheRemoveData&, const KvCacheRemoveData&) = default;
};

struct KvCacheClearData {
  friend bool operator==(const KvCacheClearData&, const KvCacheClearData&) = default;
};

using KvCacheEventData = std::variant<KvCacheStoreData, KvCacheRemoveData, KvCacheClearData>;

struct KvCacheEvent {
  std::uint64_t event_id = 0;  // monotonically increasing per (worker, rank) publisher
  KvCacheEventData data;
  DpRank dp_rank = 0;

  friend bool operator==(const KvCacheEvent&, const KvCacheEvent&) = default;
};

// Where a worker holds a block. Each tier is indexed in its own tree (lanes/lane_indexer.h); `device`
// is the one overlap `scores` answer for.
enum class StorageTier : std::uint8_t { device, host_pinned, disk, external };
inline constexpr std::size_t kStorageTierCount = 4;
inline constexpr std::array<StorageTier, kStorageTierCount> kStorageTiers{StorageTier::device, StorageTier::host_pinned,
                                                                          StorageTier::disk, StorageTier::external};
inline constexpr std::size_t tier_index(StorageTier tier) { return static_cast<std::size_t>(tier); }

std::string_view to_string(StorageTier tier);
std::optional<StorageTier> storage_tier_from_string(std::string_view name);

struct RouterEvent {
  WorkerId worker_id = 0;
  KvCacheEvent event;
  std::optional<StorageTier> storage_tier;  // absent on the wire means device

  WorkerWithDpRank stream() const { return {worker_id, event.dp_rank}; }
  StorageTier tier() const { return storage_tier.value_or(StorageTier::device); }
  friend bool operator==(const RouterEvent&, const RouterEvent&) = default;
};

enum class EventKind : std::uint8_t { stored, removed, cleared };
inline EventKind kind_of(const KvCacheEventData& data) { return static_cast<EventKind>(data.index()); }
std::string_view to_string(EventKind kind);

struct WorkerWithDpRankHasher {
  std::size_t operator()(const WorkerWithDpRank& w) const noexcept {
    // NOTE: the multiplier spreads the rank into the high bits so (w, r) and (w + r, 0) differ.
    return std::hash<std::uint64_t>{}(w.worker_id ^ (std::uint64_t{w.dp_rank} * 0x9E3779B97F4A7C15ULL));
  }
};

// Result of a score query. Only (worker, rank)s with a score above zero appear in `scores`.
struct OverlapScores {
  // In no meaningful order (see FlatMap); one entry per stream.
  FlatMap<WorkerWithDpRank, std::uint32_t> scores;
  // frequencies[d]: number of (worker, rank)s still matching at depth d.
  std::vector<std::size_t> frequencies;
  // Blocks held per (worker, rank) that scored.
  FlatMap<WorkerWithDpRank, std::size_t> tree_sizes;
};

}  // namespace kvidx

template <>
struct std::hash<kvidx::WorkerWithDpRank> : kvidx::WorkerWithDpRankHasher {};
template <>
struct std::hash<kvidx::LocalBlockHash> {
  std::size_t operator()(const kvidx::LocalBlockHash& h) const noexcept { return std::hash<std::uint64_t>{}(h.value); }
};
template <>
struct std::hash<kvidx::ExternalSequenceBlockHash> {
  std::size_t operator()(const kvidx::ExternalSequenceBlockHash& h) const noexcept {
    return std::hash<std::uint64_t>{}(h.value);
  }
};
