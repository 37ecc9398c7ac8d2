// merge_score_replies (libcodec/score_merge.h): the replies of indexes that each hold a disjoint
// part of the fleet's workers, merged, are byte for byte the reply of one index holding all of them:
// scores, frequencies, tree_sizes, active_blocks, tier_scores and combined_scores.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <random>

#include "libcodec/score_merge.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"

using namespace kvidx;
using kvidx::testing::Hashes;
using kvidx::testing::make_store_event_with_dp_rank;

namespace {

constexpr std::uint32_t kParts = 3;

struct Fleet {
  LaneIndexer whole{2};
  std::vector<std::unique_ptr<LaneIndexer>> parts;
  StreamLoads whole_loads;
  std::vector<StreamLoads> part_loads{kParts};
  std::vector<Hashes> bases;

  std::uint32_t part_of(WorkerId w) const { return static_cast<std::uint32_t>(w % kParts); }

  // 30 workers x 2 ranks store random prefixes of 6 base sequences of 12 blocks; workers 6k hold
  // theirs on host_pinned, 6k+3 some on disk: all in part 0, so lower tiers score on one part only.
  explicit Fleet(std::uint64_t seed) {
    for (std::uint32_t i = 0; i < kParts; ++i) parts.push_back(std::make_unique<LaneIndexer>(2));
    std::mt19937_64 rng(seed);
    for (std::uint64_t b = 0; b < 6; ++b) {
      Hashes base;
      for (std::uint64_t d = 0; d < 12; ++d) base.push_back(d < 2 ? d + 1 : 1000 * (b + 1) + d);
      bases.push_back(base);
    }
    for (WorkerId w = 1; w <= 30; ++w) {
      for (DpRank r = 0; r < 2; ++r) {
        for (int n = 0; n < 3; ++n) {
          const Hashes& base = bases[rng() % bases.size()];
          Hashes locals(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(1 + rng() % base.size()));
          RouterEvent e = make_store_event_with_dp_rank(w, locals, r);
          if (w % 6 == 0) e.storage_tier = StorageTier::host_pinned;
          if (w % 6 == 3 && n == 2) e.storage_tier = StorageTier::disk;
          REQUIRE(whole.enqueue_event(e) == IndexerStatus::ok);
          REQUIRE(parts[part_of(w)]->enqueue_event(e) == IndexerStatus::ok);
        }
        if (w % 7 == 0) {
          whole_loads[{w, r}] = 5 + w;
          part_loads[part_of(w)][{w, r}] = 5 + w;
        }
      }
    }
    REQUIRE(whole.flush() == IndexerStatus::ok);
    for (auto& p : parts) REQUIRE(p->flush() == IndexerStatus::ok);
  }
};

// Every query prefix of every base, plus a few that leave the tree midway.
std::vector<std::vector<LocalBlockHash>> queries(const Fleet& fleet) {
  std::vector<std::vector<LocalBlockHash>> out;
  for (const Hashes& base : fleet.bases) {
    for (std::size_t n = 1; n <= base.size(); ++n) {
      std::vector<LocalBlockHash> q;
      for (std::size_t i = 0; i < n; ++i) q.push_back(LocalBlockHash{base[i]});
      out.push_back(q);
      q.push_back(LocalBlockHash{424242});
      out.push_back(q);
    }
  }
  out.push_back({LocalBlockHash{999}});
  return out;
}

void check_merge_equals_whole(const Fleet& fleet, const TierWeights& weights, bool with_loads) {
  std::size_t with_tiers = 0;
  std::size_t partial_tiers = 0;  // a lower tier scored on some parts only
  for (const auto& q : queries(fleet)) {
    const ScoreReply whole =
        make_score_reply(fleet.whole.find_tiered_matches(q), weights, with_loads ? fleet.whole_loads : StreamLoads{});
    std::vector<ScoreReply> parts;
    std::size_t parts_with_combined = 0;
    for (std::uint32_t i = 0; i < kParts; ++i) {
      parts.push_back(make_score_reply(fleet.parts[i]->find_tiered_matches(q), weights,
                                       with_loads ? fleet.part_loads[i] : StreamLoads{}));
      parts_with_combined += parts.back().combined_scores ? 1 : 0;
    }
    auto merged = merge_score_replies(parts);
    REQUIRE_MESSAGE(merged.ok(), merged.error());
    INFO("query of " << q.size() << " blocks");
    CHECK(merged.value() == whole);
    CHECK(encode_score_reply(merged.value()) == encode_score_reply(whole));
    if (!whole.tier_scores.empty()) ++with_tiers;
    if (parts_with_combined > 0 && parts_with_combined < kParts) ++partial_tiers;
  }
  // The workload exercises what the merge must get right (else the test proves little).
  CHECK(with_tiers > 0);
  if (weights.of(StorageTier::device) == 1.0) CHECK(partial_tiers > 0);
}

}  // namespace

TEST_SUITE("codec") {

TEST_CASE("merged score replies of disjoint shards equal the whole index's reply, byte for byte") {
  const Fleet fleet(7);
  check_merge_equals_whole(fleet, TierWeights{}, /*with_loads=*/true);
  check_merge_equals_whole(fleet, TierWeights{}, /*with_loads=*/false);
  TierWeights heavy_device;
  heavy_device.by_tier = {0.9, 0.75, 0.25, 0.1};  // combined_scores on every reply
  check_merge_equals_whole(fleet, heavy_device, /*with_loads=*/true);
}

TEST_CASE("merging replies that list one stream twice is an error naming it (the shards overlap)") {
  const Fleet fleet(8);
  const std::vector<LocalBlockHash> q = {LocalBlockHash{1}, LocalBlockHash{2}};
  const ScoreReply part = make_score_reply(fleet.parts[0]->find_tiered_matches(q), TierWeights{});
  REQUIRE(!part.scores.empty());
  auto merged = merge_score_replies({part, part});
  REQUIRE(!merged.ok());
  CHECK(merged.error().find("answered by two shards") != std::string::npos);
  CHECK(merged.error().find(fmt::format("worker {} rank {}", part.scores[0].worker.worker_id,
                                        part.scores[0].worker.dp_rank)) != std::string::npos);
}

TEST_CASE("merging no scores gives the empty reply") {
  auto merged = merge_score_replies({ScoreReply{}, ScoreReply{}});
  REQUIRE(merged.ok());
  CHECK(encode_score_reply(merged.value()) == R"({"frequencies":[],"scores":[],"tree_sizes":[]})");
}

}  // TEST_SUITE("codec")
