// Overlap scores per storage tier, the weights of the tiers and the one combined score built from
// them (issue 17 §2). Value types and pure functions only.
//
// Combined score of a (worker, rank): the sum, over the query's block positions, of the weight of
// the best tier (highest weight) that holds the prefix up to that position. A tier's score is a
// prefix length (the stream holds blocks 0..s-1 there), so with device 2 and host_pinned 5 the
// combined score is 2 x 1.0 + 3 x 0.75 = 4.25. Why per position: an engine takes each block of a
// prefix once, from the fastest tier that has it (vLLM reuses its GPU blocks, then loads the rest
// from its CPU / disk offload). Summing weight x score over tiers would count blocks held in two
// tiers twice (5.75 here); taking the best single tier (3.75) would lose the GPU blocks' edge.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "libindexer/flat_map.h"
#include "libindexer/protocol.h"

namespace kvidx {

// Weight of a hit in each tier. Defaults: Dynamo's router for device (1.0), host_pinned (0.75) and
// disk (0.25); external (a remote or shared store such as LMCache's server or Mooncake's, read over
// the network and often shared by several workers, so a hit there says little about which worker
// to pick) 0.1, below disk.
struct TierWeights {
  std::array<double, kStorageTierCount> by_tier{1.0, 0.75, 0.25, 0.1};

  double of(StorageTier tier) const { return by_tier[tier_index(tier)]; }
  bool is_default() const { return by_tier == TierWeights{}.by_tier; }
  friend bool operator==(const TierWeights&, const TierWeights&) = default;
};

// "host_pinned=0.8,disk=0.2": the tiers named get their weight, the others keep the default.
// A weight is a finite number from 0 to 1000. Error: a reason naming the bad entry.
std::optional<TierWeights> parse_tier_weights(std::string_view text, std::string& error);
// "device=1,host_pinned=0.75,disk=0.25,external=0.1" (every tier, parse_tier_weights reads it back).
std::string format_tier_weights(const TierWeights& weights);

inline constexpr std::size_t kLowerTierCount = kStorageTierCount - 1;

struct TieredOverlapScores {
  OverlapScores device;  // the device tree's answer, as LaneIndexer::find_matches gives it
  // Scores above zero of the lower tiers (host_pinned, disk, external: index tier_index - 1);
  // empty for a tier that no stream holding the query's first block has.
  std::array<FlatMap<WorkerWithDpRank, std::uint32_t>, kLowerTierCount> lower;

  bool any_lower() const;
  const FlatMap<WorkerWithDpRank, std::uint32_t>& scores_of(StorageTier tier) const;
};

// Combined score (see the top of this file) of every stream with a score above zero in any tier
// whose weight is above zero; in no meaningful order (FlatMap).
FlatMap<WorkerWithDpRank, double> combined_scores(const TieredOverlapScores& scores, const TierWeights& weights);

}  // namespace kvidx
