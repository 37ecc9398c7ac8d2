// External hashes are per-(worker, rank) names (issue 17 §1): engines that do not share a hash seed
// call the same block (same tokens_hash path) by different external hashes. Every lookup by
// external hash (the parent of a Stored, a Removed, a dump) must use the asking stream's own names.
#include <doctest/doctest.h>

#include <optional>
#include <utility>
#include <vector>

#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/tree/radix_tree.h"
#include "tests/support/event_builders.h"
#include "tests/support/radix_tree_test_peer.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

// Stored event of (external, local) pairs chosen by the test.
RouterEvent stored(WorkerId worker, std::optional<std::uint64_t> parent,
                   std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks, DpRank rank = 0) {
  KvCacheStoreData data;
  if (parent) data.parent_hash = ExternalSequenceBlockHash{*parent};
  for (const auto& [external, local] : blocks) {
    data.blocks.push_back(StoredBlock{ExternalSequenceBlockHash{external}, LocalBlockHash{local}});
  }
  return RouterEvent{worker, KvCacheEvent{0, std::move(data), rank}, std::nullopt};
}

RouterEvent removed(WorkerId worker, std::vector<std::uint64_t> hashes, DpRank rank = 0) {
  std::vector<ExternalSequenceBlockHash> out;
  for (const auto h : hashes) out.push_back(ExternalSequenceBlockHash{h});
  return remove_event(worker, 0, rank, std::move(out));
}

ApplyStatus apply_status(ConcurrentRadixTree& tree, DirectLookup& lookup, const RouterEvent& event) {
  const ApplyResult result = tree.apply_event(lookup, event);
  INFO(result.error);
  return result.status;
}

constexpr std::uint64_t t1 = 101, t2 = 102, t3 = 103;

}  // namespace

TEST_CASE("a worker's Removed by its own hash drops its hold when another worker named the block first") {
  ConcurrentRadixTree tree;
  DirectLookup lookup1;
  DirectLookup lookup2;
  apply_direct(tree, lookup1, stored(1, std::nullopt, {{11, t1}, {12, t2}}));
  apply_direct(tree, lookup2, stored(2, std::nullopt, {{21, t1}, {22, t2}}));
  CHECK(apply_status(tree, lookup2, removed(2, {22})) == ApplyStatus::ok);
  assert_direct_score(tree, {t1, t2}, worker(2), 1);
  assert_direct_score(tree, {t1, t2}, worker(1), 2);
  CHECK(tree.block_count(worker(2)) == 1);
  CHECK(tree.block_count(worker(1)) == 2);
  // Worker 1's names are untouched: its own Removed still finds its block.
  CHECK(apply_status(tree, lookup1, removed(1, {12})) == ApplyStatus::ok);
  assert_direct_score(tree, {t1, t2}, worker(1), 1);
}

TEST_CASE("a worker's Stored under its own parent hash is accepted when another worker named the parent first") {
  ConcurrentRadixTree tree;
  DirectLookup lookup1;
  DirectLookup lookup2;
  apply_direct(tree, lookup1, stored(1, std::nullopt, {{11, t1}, {12, t2}}));
  apply_direct(tree, lookup2, stored(2, std::nullopt, {{21, t1}, {22, t2}}));
  REQUIRE(apply_status(tree, lookup2, removed(2, {22})) == ApplyStatus::ok);
  CHECK(apply_status(tree, lookup2, stored(2, 21, {{23, t3}})) == ApplyStatus::ok);
  assert_direct_score(tree, {t1, t2, t3}, worker(2), 1);  // t2 was removed: its path stops after t1
  assert_direct_score(tree, {t1, t3}, worker(2), 2);
  assert_direct_score(tree, {t1, t2, t3}, worker(1), 2);
  // The other stream's name of the same block is not this stream's parent.
  CHECK(apply_status(tree, lookup2, stored(2, 11, {{24, t3}})) == ApplyStatus::parent_not_found);
}

TEST_CASE("per-worker hashes: a store under its own parent extends the chain to three blocks") {
  ConcurrentRadixTree tree;
  DirectLookup lookup1;
  DirectLookup lookup2;
  apply_direct(tree, lookup1, stored(1, std::nullopt, {{11, t1}, {12, t2}}));
  apply_direct(tree, lookup2, stored(2, std::nullopt, {{21, t1}, {22, t2}}));
  CHECK(apply_status(tree, lookup2, stored(2, 22, {{23, t3}})) == ApplyStatus::ok);
  assert_direct_score(tree, {t1, t2, t3}, worker(2), 3);
  assert_direct_score(tree, {t1, t2, t3}, worker(1), 2);
  // Splits move each stream's names with the blocks: worker 3 diverges after t1.
  DirectLookup lookup3;
  apply_direct(tree, lookup3, stored(3, std::nullopt, {{31, t1}, {39, 109}}));
  CHECK(apply_status(tree, lookup2, removed(2, {23})) == ApplyStatus::ok);
  CHECK(apply_status(tree, lookup1, removed(1, {12})) == ApplyStatus::ok);
  assert_direct_score(tree, {t1, t2, t3}, worker(2), 2);
  assert_direct_score(tree, {t1, t2, t3}, worker(1), 1);
  CHECK(apply_status(tree, lookup3, removed(3, {31})) == ApplyStatus::ok);
  CHECK(tree.block_count(worker(3)) == 0);
  CHECK(tree.block_count(worker(2)) == 2);
}

TEST_CASE("a dump carries each worker's own hashes and restores to an index that accepts each worker's own events") {
  LaneIndexer index(2);
  // Three engines hash their own way; worker 3 splits the shared edge, worker 2 extends it.
  REQUIRE(index.enqueue_event(stored(1, std::nullopt, {{11, t1}, {12, t2}, {13, t3}})) == IndexerStatus::ok);
  REQUIRE(index.enqueue_event(stored(2, std::nullopt, {{21, t1}, {22, t2}, {23, t3}})) == IndexerStatus::ok);
  REQUIRE(index.enqueue_event(stored(3, std::nullopt, {{31, t1}, {39, 109}})) == IndexerStatus::ok);
  REQUIRE(index.enqueue_event(stored(2, 23, {{24, 104}})) == IndexerStatus::ok);
  REQUIRE(index.enqueue_event(stored(1, 12, {{18, 108}})) == IndexerStatus::ok);
  const auto dumped = index.dump_events();
  REQUIRE(dumped.has_value());
  // Every block in the dump is named as its stream named it.
  for (const auto& event : *dumped) {
    const auto& data = std::get<KvCacheStoreData>(event.event.data);
    const std::uint64_t owner = event.worker_id * 10;
    if (data.parent_hash) CHECK(data.parent_hash->value / 10 * 10 == owner);
    for (const auto& block : data.blocks) CHECK(block.block_hash.value / 10 * 10 == owner);
  }

  LaneIndexer restored(1);
  for (const auto& event : *dumped) REQUIRE(restored.enqueue_event(event) == IndexerStatus::ok);
  REQUIRE(restored.flush() == IndexerStatus::ok);
  CHECK(restored.metrics().applied_with(ApplyStatus::ok) == dumped->size());
  const auto again = restored.dump_events();
  REQUIRE(again.has_value());
  CHECK(snapshot_events(*again) == snapshot_events(*dumped));
  for (const Hashes& query : {Hashes{t1, t2, t3, 104}, Hashes{t1, t2, 108}, Hashes{t1, 109}}) {
    const auto want = index.find_matches(local_hashes(query));
    const auto got = restored.find_matches(local_hashes(query));
    CHECK(want.scores == got.scores);
    CHECK(want.tree_sizes == got.tree_sizes);
  }
  // The restored lookups hold each worker's own names: the same Removed works on both indexes.
  for (LaneIndexer* idx : {&index, &restored}) {
    REQUIRE(idx->enqueue_event(removed(2, {22})) == IndexerStatus::ok);
    REQUIRE(idx->enqueue_event(removed(3, {39})) == IndexerStatus::ok);
    REQUIRE(idx->enqueue_event(stored(1, 18, {{19, 110}})) == IndexerStatus::ok);
    REQUIRE(idx->flush() == IndexerStatus::ok);
    CHECK(idx->metrics().applied_with(ApplyStatus::ok) == idx->metrics().applied_total());
    const auto scores = idx->find_matches(local_hashes({t1, t2, 108, 110}));
    CHECK(score_of(scores, worker(1)) == std::optional<std::uint32_t>{4});
    CHECK(score_of(scores, worker(2)) == std::optional<std::uint32_t>{1});
    CHECK(score_of(scores, worker(3)) == std::optional<std::uint32_t>{1});
  }
}
