// Storage tiers (issue 17 §2): each tier is its own tree fed by the stream's lane; `scores` stay
// device-only, lower tiers are answered beside them.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/tier_scores.h"
#include "tests/support/event_builders.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

RouterEvent on_tier(RouterEvent event, StorageTier tier, std::uint64_t event_id) {
  event.storage_tier = tier;
  event.event.event_id = event_id;
  return event;
}

void apply(LaneIndexer& index, RouterEvent event) {
  REQUIRE(index.enqueue_event(std::move(event)) == IndexerStatus::ok);
}

}  // namespace

TEST_CASE("offloaded_then_evicted_block_does_not_score_on_device") {
  // vLLM's offloading: the block is stored on GPU, evicted from GPU, then its CPU copy is reported.
  LaneIndexer index(2);
  const Hashes blocks{1, 2, 3};
  apply(index, make_store_event(7, blocks));
  apply(index, on_tier(make_remove_event_with_parent(7, {}, blocks), StorageTier::device, 1));
  apply(index, on_tier(make_store_event(7, blocks), StorageTier::host_pinned, 2));
  REQUIRE(index.flush() == IndexerStatus::ok);
  const OverlapScores scores = index.find_matches(local_hashes(blocks));
  INFO("scores=" << describe(scores));
  CHECK(score_of(scores, worker(7)) == std::nullopt);
}

namespace {

std::optional<std::uint32_t> tier_score(const TieredOverlapScores& scores, StorageTier tier, WorkerWithDpRank stream) {
  const auto& map = scores.scores_of(tier);
  const auto it = map.find(stream);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

std::optional<double> combined_of(const TieredOverlapScores& scores, WorkerWithDpRank stream,
                                  const TierWeights& weights = {}) {
  const auto combined = combined_scores(scores, weights);
  const auto it = combined.find(stream);
  if (it == combined.end()) return std::nullopt;
  return it->second;
}

}  // namespace

TEST_CASE("offload_to_host_then_evict_from_device_scores_on_host_only") {
  // The scenario: stored on device, the same blocks stored on host_pinned (CPU offload),
  // removed from device (GPU eviction).
  LaneIndexer index(2);
  const Hashes blocks{1, 2, 3, 4};
  apply(index, make_store_event(7, blocks));
  apply(index, on_tier(make_store_event(7, blocks), StorageTier::host_pinned, 1));
  REQUIRE(index.flush() == IndexerStatus::ok);
  {
    const auto both = index.find_tiered_matches(local_hashes(blocks));
    CHECK(tier_score(both, StorageTier::device, worker(7)) == 4u);
    CHECK(tier_score(both, StorageTier::host_pinned, worker(7)) == 4u);
    // Each position counts once, at the best tier holding it.
    CHECK(combined_of(both, worker(7)) == doctest::Approx(4.0));
  }
  apply(index, on_tier(make_remove_event_with_parent(7, {}, blocks), StorageTier::device, 2));
  REQUIRE(index.flush() == IndexerStatus::ok);
  const auto scores = index.find_tiered_matches(local_hashes(blocks));
  INFO("device scores=" << describe(scores.device));
  CHECK(scores.device.scores.empty());
  CHECK(index.find_matches(local_hashes(blocks)).scores.empty());
  CHECK(tier_score(scores, StorageTier::host_pinned, worker(7)) == 4u);
  CHECK(tier_score(scores, StorageTier::disk, worker(7)) == std::nullopt);
  CHECK(combined_of(scores, worker(7)) == doctest::Approx(0.75 * 4));
  std::string error;
  const auto weights = parse_tier_weights("host_pinned=0.8", error);
  REQUIRE(weights.has_value());
  CHECK(combined_of(scores, worker(7), *weights) == doctest::Approx(0.8 * 4));
}

TEST_CASE("removal_in_one_tier_leaves_the_other_tiers") {
  LaneIndexer index(2);
  const Hashes blocks{10, 11, 12};
  apply(index, make_store_event(3, blocks));
  apply(index, on_tier(make_store_event(3, blocks), StorageTier::disk, 1));
  apply(index, on_tier(make_store_event(3, {10, 11}), StorageTier::external, 2));
  // Disk drops the last block only; external and device keep theirs.
  apply(index, on_tier(make_remove_event_with_parent(3, {10, 11}, {12}), StorageTier::disk, 3));
  REQUIRE(index.flush() == IndexerStatus::ok);
  auto scores = index.find_tiered_matches(local_hashes(blocks));
  CHECK(tier_score(scores, StorageTier::device, worker(3)) == 3u);
  CHECK(tier_score(scores, StorageTier::disk, worker(3)) == 2u);
  CHECK(tier_score(scores, StorageTier::external, worker(3)) == 2u);
  CHECK(tier_score(scores, StorageTier::host_pinned, worker(3)) == std::nullopt);
  // A Removed naming a block the tier never held is block_not_found there, whatever other tiers hold.
  apply(index, on_tier(make_remove_event_with_parent(3, {}, {10}), StorageTier::host_pinned, 4));
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(index.metrics().applied[static_cast<std::size_t>(EventKind::removed)]
                               [static_cast<std::size_t>(ApplyStatus::block_not_found)] == 1);
  scores = index.find_tiered_matches(local_hashes(blocks));
  CHECK(tier_score(scores, StorageTier::device, worker(3)) == 3u);
  // Device removal leaves disk and external.
  apply(index, make_remove_event_with_parent(3, {}, {10}));
  REQUIRE(index.flush() == IndexerStatus::ok);
  scores = index.find_tiered_matches(local_hashes(blocks));
  CHECK(tier_score(scores, StorageTier::device, worker(3)) == std::nullopt);
  CHECK(tier_score(scores, StorageTier::disk, worker(3)) == 2u);
  CHECK(tier_score(scores, StorageTier::external, worker(3)) == 2u);
  // Per position: 2 blocks at disk's 0.25 (external's 0.1 is worse).
  CHECK(combined_of(scores, worker(3)) == doctest::Approx(0.5));
  const ShardSizes sizes = index.shard_sizes();
  CHECK(sizes.block_count == 0);
  CHECK(sizes.blocks_by_tier[tier_index(StorageTier::device)] == 0);
  CHECK(sizes.blocks_by_tier[tier_index(StorageTier::disk)] == 2);
  CHECK(sizes.blocks_by_tier[tier_index(StorageTier::external)] == 2);
  CHECK(sizes.streams_by_tier[tier_index(StorageTier::disk)] == 1);
  CHECK(index.get_workers() == std::vector<WorkerId>{3});
  const auto metrics = index.metrics();
  CHECK(metrics.applied_by_tier[tier_index(StorageTier::device)] == 2);
  CHECK(metrics.applied_by_tier[tier_index(StorageTier::disk)] == 2);
  CHECK(metrics.applied_by_tier[tier_index(StorageTier::external)] == 1);
  CHECK(metrics.applied_by_tier[tier_index(StorageTier::host_pinned)] == 1);
}

TEST_CASE("cleared_of_any_tier_clears_the_stream_in_every_tier") {
  // Cleared carries a tier on the wire, but a stream's events and event ids are one sequence:
  // vLLM's AllBlocksCleared has no medium, and a restart (cleared by the intake) loses every copy.
  for (const StorageTier clear_tier : kStorageTiers) {
    CAPTURE(to_string(clear_tier));
    LaneIndexer index(2);
    const Hashes blocks{5, 6};
    for (const StorageTier tier : kStorageTiers) {
      apply(index, on_tier(make_store_event(1, blocks), tier, 0));
      apply(index, on_tier(make_store_event(2, blocks), tier, 0));
    }
    RouterEvent clear = make_clear_event_with_dp_rank(1, 0);
    clear.storage_tier = clear_tier;
    apply(index, clear);
    REQUIRE(index.flush() == IndexerStatus::ok);
    const auto scores = index.find_tiered_matches(local_hashes(blocks));
    for (const StorageTier tier : kStorageTiers) {
      CAPTURE(to_string(tier));
      CHECK(tier_score(scores, tier, worker(1)) == std::nullopt);
      CHECK(tier_score(scores, tier, worker(2)) == 2u);
    }
  }
}

TEST_CASE("remove_worker_drops_every_tier") {
  LaneIndexer index(2);
  const Hashes blocks{8, 9};
  for (const StorageTier tier : kStorageTiers) {
    apply(index, on_tier(make_store_event_with_dp_rank(4, blocks, 0), tier, 0));
    apply(index, on_tier(make_store_event_with_dp_rank(4, blocks, 1), tier, 0));
    apply(index, on_tier(make_store_event(5, blocks), tier, 0));
  }
  REQUIRE(index.remove_worker_dp_rank(4, 1) == IndexerStatus::ok);
  REQUIRE(index.flush() == IndexerStatus::ok);
  auto scores = index.find_tiered_matches(local_hashes(blocks));
  for (const StorageTier tier : kStorageTiers) {
    CAPTURE(to_string(tier));
    CHECK(tier_score(scores, tier, worker(4, 1)) == std::nullopt);
    CHECK(tier_score(scores, tier, worker(4, 0)) == 2u);
  }
  REQUIRE(index.remove_worker(4) == IndexerStatus::ok);
  scores = index.find_tiered_matches(local_hashes(blocks));
  for (const StorageTier tier : kStorageTiers) {
    CAPTURE(to_string(tier));
    CHECK(tier_score(scores, tier, worker(4, 0)) == std::nullopt);
    CHECK(tier_score(scores, tier, worker(5)) == 2u);
  }
  CHECK(index.get_workers() == std::vector<WorkerId>{5});
}

TEST_CASE("dump_carries_tiers_and_a_restore_keeps_them") {
  LaneIndexer index(2);
  apply(index, make_store_event(1, {1, 2, 3}));
  apply(index, on_tier(make_store_event(1, {1, 2, 3, 4}), StorageTier::host_pinned, 1));
  apply(index, on_tier(make_store_event(2, {1, 2}), StorageTier::disk, 0));
  apply(index, on_tier(make_store_event(3, {1}), StorageTier::external, 0));
  auto dumped = index.dump_events();
  REQUIRE(dumped.has_value());
  std::size_t device_events = 0;
  for (const auto& event : *dumped) {
    // Device events stay as Dynamo writes them: no storage_tier.
    if (event.worker_id == 1 && std::get<KvCacheStoreData>(event.event.data).blocks.size() == 3) {
      CHECK_FALSE(event.storage_tier.has_value());
      ++device_events;
    }
  }
  CHECK(device_events == 1);
  LaneIndexer restored(3);
  for (auto event : *dumped) apply(restored, std::move(event));
  REQUIRE(restored.flush() == IndexerStatus::ok);
  const Hashes query{1, 2, 3, 4};
  const auto before = index.find_tiered_matches(local_hashes(query));
  const auto after = restored.find_tiered_matches(local_hashes(query));
  CHECK(after.device.scores == before.device.scores);
  for (std::size_t i = 0; i < kLowerTierCount; ++i) CHECK(after.lower[i] == before.lower[i]);
  CHECK(tier_score(after, StorageTier::host_pinned, worker(1)) == 4u);
  CHECK(tier_score(after, StorageTier::disk, worker(2)) == 2u);
  CHECK(tier_score(after, StorageTier::external, worker(3)) == 1u);
  auto redumped = restored.dump_events();
  REQUIRE(redumped.has_value());
  CHECK(snapshot_events(*redumped) == snapshot_events(*dumped));
}

TEST_CASE("combined_score_takes_the_best_tier_per_position") {
  TieredOverlapScores scores;
  scores.device.scores.append(worker(1), 2);
  scores.lower[tier_index(StorageTier::host_pinned) - 1].append(worker(1), 5);
  scores.lower[tier_index(StorageTier::disk) - 1].append(worker(1), 7);
  scores.lower[tier_index(StorageTier::disk) - 1].append(worker(2), 3);
  scores.lower[tier_index(StorageTier::external) - 1].append(worker(3), 10);
  const auto combined = combined_scores(scores, TierWeights{});
  CHECK(combined.at(worker(1)) == doctest::Approx(2 * 1.0 + 3 * 0.75 + 2 * 0.25));
  CHECK(combined.at(worker(2)) == doctest::Approx(3 * 0.25));
  CHECK(combined.at(worker(3)) == doctest::Approx(10 * 0.1));
  // A tier with a higher weight than device counts first; a weight of 0 drops the tier.
  std::string error;
  const auto weights = parse_tier_weights("host_pinned=2, external=0", error);
  REQUIRE_MESSAGE(weights.has_value(), error);
  const auto reweighted = combined_scores(scores, *weights);
  CHECK(reweighted.at(worker(1)) == doctest::Approx(5 * 2.0 + 2 * 0.25));
  CHECK_FALSE(reweighted.contains(worker(3)));
}

TEST_CASE("tier_weights_parse_and_format") {
  std::string error;
  const auto defaults = parse_tier_weights(format_tier_weights(TierWeights{}), error);
  REQUIRE(defaults.has_value());
  CHECK(*defaults == TierWeights{});
  CHECK(format_tier_weights(TierWeights{}) == "device=1,host_pinned=0.75,disk=0.25,external=0.1");
  const auto some = parse_tier_weights("disk=0.5", error);
  REQUIRE(some.has_value());
  CHECK(some->of(StorageTier::disk) == 0.5);
  CHECK(some->of(StorageTier::host_pinned) == 0.75);
  CHECK_FALSE(parse_tier_weights("tape=1", error).has_value());
  CHECK(error == "unknown tier 'tape' (expected device, host_pinned, disk or external)");
  CHECK_FALSE(parse_tier_weights("disk=-1", error).has_value());
  CHECK(error == "tier disk: bad weight '-1' (expected a number from 0 to 1000)");
  CHECK_FALSE(parse_tier_weights("disk=0.5x", error).has_value());
  CHECK_FALSE(parse_tier_weights("disk=nan", error).has_value());
  CHECK_FALSE(parse_tier_weights("disk", error).has_value());
  CHECK(error == "'disk': expected TIER=WEIGHT");
  CHECK_FALSE(parse_tier_weights("", error).has_value());
}
