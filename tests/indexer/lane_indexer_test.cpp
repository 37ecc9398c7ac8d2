// Ports of the reference's tests that run through the thread pool (seed 000's ThreadPoolIndexer
// tests and seed 002's lane-assignment tests), plus the lane failure path. Same names and numbers.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/lanes/lane_observation.h"
#include "tests/support/event_builders.h"
#include "tests/support/lane_indexer_test_peer.h"
#include "tests/support/radix_tree_test_peer.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

void apply(LaneIndexer& index, RouterEvent event) {
  REQUIRE(index.enqueue_event(std::move(event)) == IndexerStatus::ok);
}

void flush_and_settle(LaneIndexer& index) { REQUIRE(index.flush() == IndexerStatus::ok); }

void assert_score(const LaneIndexer& index, const Hashes& query, WorkerWithDpRank stream, std::uint32_t expected) {
  const auto scores = index.find_matches(local_hashes(query));
  INFO("worker=" << stream.worker_id << " rank=" << stream.dp_rank << " scores=" << describe(scores));
  CHECK(score_of(scores, stream) == std::optional<std::uint32_t>{expected});
}

void assert_no_scores(const LaneIndexer& index, const Hashes& query) {
  const auto scores = index.find_matches(local_hashes(query));
  INFO("scores=" << describe(scores));
  CHECK(scores.scores.empty());
}

std::vector<RouterEvent> snapshot_tree(LaneIndexer& index) {
  auto events = index.dump_events();
  REQUIRE(events.has_value());
  return snapshot_events(std::move(*events));
}

std::size_t index_block_count(LaneIndexer& index) { return index.shard_sizes().block_count; }

Hashes range(std::uint64_t first, std::uint64_t last) {
  Hashes out(last - first + 1);
  std::iota(out.begin(), out.end(), first);
  return out;
}

}  // namespace

// ---- seed 000: race_tests::clear (through the pool) ----

TEST_CASE("clear_sweeps_only_its_rank_across_split_suffixes") {
  LaneIndexer index(2);
  const auto worker_a0 = worker(1, 0);
  const auto worker_a1 = worker(1, 1);
  const auto worker_b = worker(2, 0);

  apply(index, make_store_event_with_dp_rank(1, {1, 2}, 0));
  apply(index, make_store_event_with_dp_rank(1, {1, 2}, 1));
  apply(index, make_store_event(2, {1, 2}));
  flush_and_settle(index);

  apply(index, make_store_event_with_parent(2, {1}, {3}));
  flush_and_settle(index);

  apply(index, make_clear_event_with_dp_rank(1, 0));
  flush_and_settle(index);

  apply(index, make_store_event_with_dp_rank(1, {1}, 0));
  apply(index, make_store_event_with_dp_rank(1, {1}, 1));
  flush_and_settle(index);

  assert_score(index, {1, 2}, worker_a0, 1);
  assert_score(index, {1, 2}, worker_a1, 2);
  assert_score(index, {1, 2}, worker_b, 2);
  assert_score(index, {1, 3}, worker_b, 2);
}

TEST_CASE("worker_removal_respects_dp_rank_and_worker_targets") {
  LaneIndexer index(4);
  const auto worker_a0 = worker(1, 0);
  const auto worker_a1 = worker(1, 1);
  const auto worker_b = worker(2, 0);

  apply(index, make_store_event_with_dp_rank(1, {1, 2}, 0));
  apply(index, make_store_event_with_dp_rank(1, {1, 2}, 1));
  apply(index, make_store_event(2, {1, 2}));
  flush_and_settle(index);
  apply(index, make_store_event_with_parent(2, {1}, {3}));
  flush_and_settle(index);

  REQUIRE(index.remove_worker_dp_rank(1, 0) == IndexerStatus::ok);
  flush_and_settle(index);
  auto scores = index.find_matches(local_hashes({1, 2}));
  CHECK_FALSE(scores.scores.contains(worker_a0));
  CHECK(score_of(scores, worker_a1) == std::optional<std::uint32_t>{2});
  CHECK(score_of(scores, worker_b) == std::optional<std::uint32_t>{2});

  REQUIRE(index.remove_worker(1) == IndexerStatus::ok);
  flush_and_settle(index);
  scores = index.find_matches(local_hashes({1, 2}));
  CHECK_FALSE(scores.scores.contains(worker_a0));
  CHECK_FALSE(scores.scores.contains(worker_a1));
  CHECK(score_of(scores, worker_b) == std::optional<std::uint32_t>{2});
}

// ---- seed 000: structural_tests ----

TEST_CASE("test_extends_decode_tail_in_place") {
  LaneIndexer index(1);
  const auto worker0 = worker(0);

  apply(index, make_store_event(0, {1, 2, 3}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {4}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3, 4}, {5}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3, 4, 5}, {6}));
  flush_and_settle(index);

  assert_score(index, {1, 2, 3, 4, 5, 6}, worker0, 6);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  CHECK(snapshot_tree(index) == std::vector{make_store_event(0, {1, 2, 3, 4, 5, 6})});
}

TEST_CASE("test_extension_downgrade_can_split_later") {
  LaneIndexer index(1);
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);

  apply(index, make_store_event(1, {1, 2, 3}));
  apply(index, make_store_event(2, {1, 2, 3}));
  flush_and_settle(index);

  apply(index, make_store_event_with_parent(1, {1, 2, 3}, {4, 5, 6}));
  flush_and_settle(index);

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker2, 3);

  apply(index, make_store_event_with_parent(2, {1, 2, 3}, {7, 8}));
  flush_and_settle(index);

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 3);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker2, 3);
  assert_score(index, {1, 2, 3, 7, 8}, worker1, 3);
  assert_score(index, {1, 2, 3, 7, 8}, worker2, 5);

  const auto expected = snapshot_events({
      make_store_event(1, {1, 2, 3}),
      make_store_event_with_parent(1, {1, 2, 3}, {4, 5, 6}),
      make_store_event(2, {1, 2, 3}),
      make_store_event_with_parent(2, {1, 2, 3}, {7, 8}),
  });
  CHECK(snapshot_tree(index) == expected);
}

TEST_CASE("test_reuses_prefix_suffix_and_extends_to_nine") {
  LaneIndexer index(1);
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);

  apply(index, make_store_event(1, {1, 2, 3, 4, 5, 6}));
  flush_and_settle(index);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);

  apply(index, make_store_event(2, {1, 2, 3}));
  flush_and_settle(index);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker2, 3);

  apply(index, make_store_event_with_parent(2, {1, 2, 3}, {4, 5, 6}));
  flush_and_settle(index);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_score(index, {1, 2, 3, 4, 5, 6}, worker2, 6);

  apply(index, make_store_event_with_parent(2, {1, 2, 3, 4, 5, 6}, {7, 8, 9}));
  flush_and_settle(index);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  assert_score(index, {1, 2, 3, 4, 5, 6, 7, 8, 9}, worker1, 6);
  assert_score(index, {1, 2, 3, 4, 5, 6, 7, 8, 9}, worker2, 9);

  const auto expected = snapshot_events({
      make_store_event(1, {1, 2, 3, 4, 5, 6}),
      make_store_event(2, {1, 2, 3, 4, 5, 6, 7, 8, 9}),
  });
  CHECK(snapshot_tree(index) == expected);
}

TEST_CASE("test_reuses_internal_suffix_and_extends_leaf_without_split") {
  LaneIndexer index(1);
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  const Hashes one_to_10 = range(1, 10);
  const Hashes one_to_35 = range(1, 35);
  const Hashes one_to_40 = range(1, 40);
  const Hashes eleven_to_40 = range(11, 40);

  apply(index, make_store_event(1, one_to_35));
  apply(index, make_store_event(2, one_to_10));
  flush_and_settle(index);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  assert_score(index, one_to_40, worker1, 35);
  assert_score(index, one_to_40, worker2, 10);

  apply(index, make_store_event_with_parent(2, one_to_10, eleven_to_40));
  flush_and_settle(index);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  assert_score(index, one_to_40, worker1, 35);
  assert_score(index, one_to_40, worker2, 40);

  const auto expected = snapshot_events({make_store_event(1, one_to_35), make_store_event(2, one_to_40)});
  CHECK(snapshot_tree(index) == expected);
}

// ---- seed 000: remove_cleanup_tests ----

TEST_CASE("test_restore_after_mid_chain_remove_updates_score") {
  LaneIndexer index(1);
  const auto worker0 = worker(0);

  apply(index, make_store_event(0, {1, 2, 3}));
  flush_and_settle(index);
  assert_score(index, {1, 2, 3}, worker0, 3);
  CHECK(index_block_count(index) == 3);

  apply(index, make_remove_event_with_parent(0, {1}, {2}));
  flush_and_settle(index);
  assert_score(index, {1, 2, 3}, worker0, 1);
  CHECK(index_block_count(index) == 1);

  apply(index, make_store_event_with_parent(0, {1}, {2, 3}));
  flush_and_settle(index);
  assert_score(index, {1, 2, 3}, worker0, 3);
  CHECK(index_block_count(index) == 3);
}

TEST_CASE("test_partial_node_drops_unreachable_descendants") {
  LaneIndexer index(1);

  apply(index, make_store_event(0, {1, 2, 3}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {4, 5}));
  flush_and_settle(index);

  apply(index, make_remove_event_with_parent(0, {1}, {2}));
  flush_and_settle(index);

  CHECK(snapshot_tree(index) == std::vector{make_store_event(0, {1})});
}

TEST_CASE("test_cleanup_prunes_dead_children_under_live_prefix") {
  LaneIndexer index(1);

  apply(index, make_store_event(0, {1, 2, 3}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {6, 7}));
  flush_and_settle(index);

  apply(index, make_remove_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply(index, make_remove_event_with_parent(0, {1, 2, 3}, {6, 7}));
  flush_and_settle(index);

  const std::vector expected_snapshot{make_store_event(0, {1, 2, 3})};
  CHECK(snapshot_tree(index) == expected_snapshot);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 3);

  RadixTreeTestPeer::run_cleanup_for_test(index.tree());

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 1);
  CHECK(snapshot_tree(index) == std::vector{make_store_event(0, {1, 2, 3})});
  assert_score(index, {1, 2, 3}, worker(0), 3);
}

TEST_CASE("test_cleanup_does_not_reopen_internal_node_for_extension") {
  LaneIndexer index(1);

  apply(index, make_store_event(0, {1, 2, 3}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {6, 7}));
  flush_and_settle(index);

  apply(index, make_remove_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply(index, make_remove_event_with_parent(0, {1, 2, 3}, {6, 7}));
  flush_and_settle(index);
  RadixTreeTestPeer::run_cleanup_for_test(index.tree());

  assert_edge_lengths(index.tree(), {3});

  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {8, 9}));
  flush_and_settle(index);

  assert_edge_lengths(index.tree(), {2, 3});
  assert_score(index, {1, 2, 3, 8, 9}, worker(0), 5);
}

// ---- seed 002: lane assignment ----

namespace {

enum class ColdRemoval { worker, dp_rank };

void assert_cold_removal_assignment(ColdRemoval removal) {
  LaneIndexer indexer(2);
  apply(indexer, make_store_event(1, {1}));
  const auto first = worker(1, 0);
  const auto removed = worker(2, 0);
  CHECK(indexer.assigned_lane(first) == std::optional<LaneId>{0});

  if (removal == ColdRemoval::worker) {
    REQUIRE(indexer.remove_worker(2) == IndexerStatus::ok);
  } else {
    REQUIRE(indexer.remove_worker_dp_rank(2, 0) == IndexerStatus::ok);
  }

  const auto expected_before_store = removal == ColdRemoval::worker ? std::nullopt : std::optional<LaneId>{1};
  CHECK(indexer.assigned_lane(removed) == expected_before_store);
  apply(indexer, make_store_event(2, {2}));
  flush_and_settle(indexer);
  CHECK(indexer.assigned_lane(removed) == std::optional<LaneId>{1});
  assert_score(indexer, {2}, removed, 1);
}

}  // namespace

TEST_CASE("cold_worker_remove_does_not_reserve_rank_queue") { assert_cold_removal_assignment(ColdRemoval::worker); }

TEST_CASE("cold_rank_remove_reserves_sticky_queue") { assert_cold_removal_assignment(ColdRemoval::dp_rank); }

TEST_CASE("sibling_ranks_use_independent_sticky_queues") {
  LaneIndexer indexer(2);
  const auto rank0 = worker(7, 0);
  const auto rank1 = worker(7, 1);

  apply(indexer, make_store_event_with_dp_rank(7, {10}, 0));
  apply(indexer, make_store_event_with_dp_rank(7, {20}, 1));

  CHECK(indexer.assigned_lane(rank0) == std::optional<LaneId>{0});
  CHECK(indexer.assigned_lane(rank1) == std::optional<LaneId>{1});
  flush_and_settle(indexer);
  assert_score(indexer, {10}, rank0, 1);
  assert_score(indexer, {20}, rank1, 1);
}

TEST_CASE("whole_worker_remove_barriers_every_rank_lane_before_returning") {
  LaneIndexer indexer(2);
  const auto rank1 = worker(7, 1);

  apply(indexer, make_store_event_with_dp_rank(7, {10}, 0));
  apply(indexer, make_store_event_with_dp_rank(7, {20}, 1));
  REQUIRE(indexer.remove_worker(7) == IndexerStatus::ok);

  assert_no_scores(indexer, {10});
  assert_no_scores(indexer, {20});

  apply(indexer, make_store_event_with_dp_rank(7, {30}, 1));
  flush_and_settle(indexer);
  assert_score(indexer, {30}, rank1, 1);
}

// ---- kvidx: lane behaviour beyond the reference's tests ----

TEST_CASE("reset_worker_dp_rank_and_wait drops the rank before returning and keeps its lane") {
  LaneIndexer indexer(3);
  apply(indexer, make_store_event_with_dp_rank(5, {1, 2, 3}, 0));
  apply(indexer, make_store_event_with_dp_rank(5, {1, 2}, 1));
  const auto lane = indexer.assigned_lane(worker(5, 0));
  REQUIRE(indexer.reset_worker_dp_rank_and_wait(5, 0) == IndexerStatus::ok);
  CHECK(indexer.assigned_lane(worker(5, 0)) == lane);
  const auto scores = indexer.find_matches(local_hashes({1, 2, 3}));
  CHECK_FALSE(scores.scores.contains(worker(5, 0)));
  flush_and_settle(indexer);
  assert_score(indexer, {1, 2, 3}, worker(5, 1), 2);
  CHECK(indexer.get_workers() == std::vector<WorkerId>{5});
  const ShardSizes sizes = indexer.shard_sizes();
  CHECK(sizes.worker_count == 1);
  CHECK(sizes.block_count == 2);
  CHECK(sizes.node_count == 1);
}

TEST_CASE("dump_events renumbers event ids from zero and replays to the same scores") {
  LaneIndexer indexer(2);
  apply(indexer, make_store_event(1, {1, 2, 3}));
  apply(indexer, make_store_event(2, {1, 2, 9}));
  apply(indexer, make_store_event_with_parent(1, {1, 2, 3}, {4}));
  const auto dumped = indexer.dump_events();
  REQUIRE(dumped.has_value());
  for (std::size_t i = 0; i < dumped->size(); ++i) CHECK((*dumped)[i].event.event_id == i);

  LaneIndexer replayed(1);
  for (const auto& event : *dumped) apply(replayed, event);
  flush_and_settle(replayed);
  for (const Hashes& query : {Hashes{1, 2, 3, 4}, Hashes{1, 2, 9}}) {
    const auto want = indexer.find_matches(local_hashes(query));
    const auto got = replayed.find_matches(local_hashes(query));
    CHECK(want.scores == got.scores);
    CHECK(want.tree_sizes == got.tree_sizes);
    CHECK(want.frequencies == got.frequencies);
  }
}

TEST_CASE("a failed lane reports the indexer offline instead of hanging callers") {
  LaneIndexer indexer(2);
  apply(indexer, make_store_event(1, {1}));
  REQUIRE(LaneIndexerTestPeer::inject_lane_failure_for_test(indexer, 0) == IndexerStatus::ok);
  CHECK(indexer.flush() == IndexerStatus::offline);
  CHECK(indexer.offline());
  CHECK(indexer.enqueue_event(make_store_event(2, {2})) == IndexerStatus::offline);
  CHECK_FALSE(indexer.dump_events().has_value());
  // Reads keep working on what was applied before the failure.
  assert_score(indexer, {1}, worker(1), 1);
}

// ---- seed 002: bench observation ----

TEST_CASE("observed_events_use_fixed_worker_buffers_and_fifo_seals") {
  LaneIndexer indexer(2);
  ObservationPlan plan;
  plan.epoch = std::chrono::steady_clock::now();
  plan.expected_events_by_stream = {{worker(1), 1}, {worker(2), 1}};
  auto observation = begin_observation(indexer, plan);
  REQUIRE(observation.ok());

  const auto first = observation->enqueue_observed(make_store_event(1, {11}), 10);
  const auto second = observation->enqueue_observed(make_store_event(2, {22}), 20);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first->lane != second->lane);

  auto sealed = std::move(observation).value().close_observed_producers().seal();
  REQUIRE(sealed.ok());
  CHECK(sealed->latest_seal_ns() >= first->accepted_ns);
  auto snapshot = std::move(sealed).value().harvest();
  REQUIRE(snapshot.ok());
  CHECK(snapshot->buffers.size() == 2);
  for (const auto& buffer : snapshot->buffers) CHECK_FALSE(buffer.overflowed());
  std::vector<std::uint32_t> ids;
  for (const auto& buffer : snapshot->buffers) {
    for (const auto& record : buffer.records()) ids.push_back(record.correlation_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::uint32_t>{10, 20});
}

// ---- kvidx: observation beyond the reference's test ----

TEST_CASE("observed records are stamped in order and a full buffer counts what it drops") {
  LaneIndexer indexer(2);
  ObservationPlan plan;
  plan.expected_events_by_stream = {{worker(1), 2}, {worker(2), 1}};
  auto observation = begin_observation(indexer, plan);
  REQUIRE(observation.ok());
  CHECK(begin_observation(indexer, plan).error() == ObservationError::already_active);
  CHECK(observation->enqueue_observed(make_store_event(3, {1}), 99).error() == ObservationError::unknown_stream);

  REQUIRE(observation->enqueue_observed(make_store_event(1, {1}), 1).ok());
  REQUIRE(observation->enqueue_observed(make_store_event_with_parent(1, {1}, {2}), 2).ok());
  REQUIRE(observation->enqueue_observed(make_store_event(2, {5}), 3).ok());
  REQUIRE(observation->enqueue_observed(make_store_event_with_parent(2, {5}, {6}), 4).ok());  // over plan

  auto drain = std::move(observation).value().close_observed_producers();
  auto sealed = std::move(drain).seal();
  REQUIRE(sealed.ok());
  const std::vector<ObservationSeal> seals = sealed->seals();
  auto snapshot = std::move(sealed).value().harvest();
  REQUIRE(snapshot.ok());

  const LaneId lane1 = *indexer.assigned_lane(worker(1));
  const LaneId lane2 = *indexer.assigned_lane(worker(2));
  const auto& buffer1 = snapshot->buffers[lane1];
  const auto& buffer2 = snapshot->buffers[lane2];
  CHECK(buffer1.capacity() == 2);
  CHECK(buffer2.capacity() == 1);
  CHECK_FALSE(buffer1.overflowed());
  CHECK(buffer2.overflowed());
  CHECK(buffer2.dropped() == 1);
  REQUIRE(buffer1.records().size() == 2);
  CHECK(buffer1.records()[0].correlation_id == 1);  // FIFO per lane
  CHECK(buffer1.records()[1].correlation_id == 2);
  for (const auto* buffer : {&buffer1, &buffer2}) {
    for (const auto& record : buffer->records()) {
      CHECK(record.applied_ns >= record.accepted_ns);
      CHECK(seals[buffer->lane()].sealed_ns >= record.applied_ns);
    }
  }
  // Observed events are applied like any other.
  assert_score(indexer, {1, 2}, worker(1), 2);
  assert_score(indexer, {5, 6}, worker(2), 2);
  CHECK(indexer.metrics().applied_with(ApplyStatus::ok) == 4);
  // The observation is over: a new one may begin.
  CHECK(begin_observation(indexer, plan).ok());
}

TEST_CASE("an abandoned observation releases the indexer and bad plans are refused") {
  LaneIndexer indexer(2);
  CHECK(begin_observation(indexer, ObservationPlan{}).error() == ObservationError::empty_plan);
  ObservationPlan duplicated;
  duplicated.expected_events_by_stream = {{worker(1), 1}, {worker(1), 1}};
  CHECK(begin_observation(indexer, duplicated).error() == ObservationError::duplicate_stream);

  ObservationPlan plan;
  plan.expected_events_by_stream = {{worker(1), 4}};
  {
    auto observation = begin_observation(indexer, plan);
    REQUIRE(observation.ok());
    REQUIRE(observation->enqueue_observed(make_store_event(1, {1}), 1).ok());
  }  // dropped without a harvest
  auto again = begin_observation(indexer, plan);
  REQUIRE(again.ok());
  auto sealed = std::move(again).value().close_observed_producers().seal();
  REQUIRE(sealed.ok());
  auto snapshot = std::move(sealed).value().harvest();
  REQUIRE(snapshot.ok());
  // NOTE: the first observation's record went to its own run; the new buffers start empty.
  for (const auto& buffer : snapshot->buffers) CHECK(buffer.records().empty());
  flush_and_settle(indexer);
  assert_score(indexer, {1}, worker(1), 1);
}

// ---- kvidx: cleanup accounting ----

TEST_CASE("dead_branches_count_as_pending_cleanup_until_cleanup_detaches_them") {
  LaneIndexer index(1);
  apply(index, make_store_event(0, {1, 2, 3}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply(index, make_store_event_with_parent(0, {1, 2, 3}, {6, 7}));
  flush_and_settle(index);
  ShardSizes sizes = index.shard_sizes();
  CHECK(sizes.block_count == 7);
  CHECK(sizes.node_count == 3);
  CHECK(sizes.blocks_pending_cleanup == 0);

  apply(index, make_remove_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply(index, make_remove_event_with_parent(0, {1, 2, 3}, {6, 7}));
  flush_and_settle(index);
  sizes = index.shard_sizes();
  // The two dead children stay attached (nodes > held blocks would be possible with more of
  // them), but are accounted for until cleanup.
  CHECK(sizes.block_count == 3);
  CHECK(sizes.node_count == 3);
  CHECK(sizes.blocks_pending_cleanup == 4);

  RadixTreeTestPeer::run_cleanup_for_test(index.tree());
  sizes = index.shard_sizes();
  CHECK(sizes.block_count == 3);
  CHECK(sizes.node_count == 1);
  CHECK(sizes.blocks_pending_cleanup == 0);
}

TEST_CASE("cleanup passes run by the lanes are counted: dead nodes removed and only children merged, per tier") {
  LaneIndexer indexer(2);
  // Worker 2 diverges from worker 1 after block 2: node [1,2] with children [3,4] and [5,6].
  apply(indexer, make_store_event(1, {1, 2, 3, 4}));
  apply(indexer, make_store_event(2, {1, 2, 5, 6}));
  flush_and_settle(indexer);
  CHECK(indexer.metrics().cleanup_nodes_removed[tier_index(StorageTier::device)] == 0);
  CHECK(indexer.metrics().cleanup_nodes_merged[tier_index(StorageTier::device)] == 0);
  // Worker 2 drops everything: [5,6] is dead, and [3,4] is [1,2]'s only child with its holders.
  apply(indexer, make_remove_event_with_parent(2, {}, {1, 2, 5, 6}));
  flush_and_settle(indexer);
  REQUIRE(LaneIndexerTestPeer::run_cleanup_for_test(indexer, StorageTier::device) == IndexerStatus::ok);
  const LaneIndexerMetrics m = indexer.metrics();
  CHECK(m.cleanup_nodes_removed[tier_index(StorageTier::device)] == 1);
  CHECK(m.cleanup_nodes_merged[tier_index(StorageTier::device)] == 1);
  CHECK(m.cleanup_nodes_merged[tier_index(StorageTier::host_pinned)] == 0);
  assert_edge_lengths(indexer.tree(), {4});
  assert_score(indexer, {1, 2, 3, 4}, worker(1), 4);
}

TEST_CASE("a lane hands its applied tasks back and the next push destroys them on its own thread") {
  LaneIndexer index(1);
  constexpr std::size_t kEvents = 500;
  std::vector<RouterEvent> events;
  for (std::size_t i = 0; i < kEvents; ++i) events.push_back(make_store_event(1 + i, {i + 1, i + 2}));
  REQUIRE(index.enqueue_events(events) == IndexerStatus::ok);
  flush_and_settle(index);
  // The lane hands back each batch once it is applied (the barrier's batch or the events' one,
  // whichever it finished last before this check): wait until it has.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (LaneIndexerTestPeer::spent_tasks_waiting(index, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::size_t waiting = LaneIndexerTestPeer::spent_tasks_waiting(index, 0);
  CHECK(waiting > 0);
  // A push takes over whatever was waiting; afterwards at most the one task it queued can be
  // waiting (if the lane applied it already), never the earlier batch.
  apply(index, make_store_event(9999, {1, 2, 3}));
  CHECK(LaneIndexerTestPeer::spent_tasks_waiting(index, 0) <= 1);
  flush_and_settle(index);
  CHECK(index.shard_sizes().worker_count == kEvents + 1);
  assert_score(index, {1, 2, 3}, worker(9999, 0), 3);
}

TEST_CASE("a lane destroys a large applied batch itself rather than keep it for the next push") {
  LaneIndexer index(1);
  const std::size_t events = LaneIndexerTestPeer::kSpentHandBackTasks + 500;  // one push: one batch
  std::vector<RouterEvent> batch;
  for (std::size_t i = 0; i < events; ++i) batch.push_back(make_store_event(1 + i, {i + 1}));
  REQUIRE(index.enqueue_events(batch) == IndexerStatus::ok);
  // The lane takes the whole queue at once; the barrier queued after that is a batch of its own.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (index.metrics().lane_queue_depths.at(0) != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  flush_and_settle(index);
  // The barrier's own batch (one task) is small enough to go back; the large one never waits.
  while (LaneIndexerTestPeer::spent_tasks_waiting(index, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(LaneIndexerTestPeer::spent_tasks_waiting(index, 0) == 1);
  CHECK(index.shard_sizes().worker_count == events);
}

TEST_CASE("a barrier arrives only after its lane has let go of the batch it came in") {
  LaneIndexer index(1);
  SUBCASE("a large batch: destroyed by the lane before the barrier returns") {
    // Large enough that freeing it takes the lane far longer than waking the waiter does.
    constexpr std::size_t kEvents = 4 * LaneIndexerTestPeer::kSpentHandBackTasks;
    std::vector<RouterEvent> events;
    for (std::size_t i = 0; i < kEvents; ++i) {
      events.push_back(make_store_event(1 + i, {i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7, i + 8}));
    }
    std::weak_ptr<void> marker;
    REQUIRE(LaneIndexerTestPeer::push_batch_and_flush(index, 0, std::move(events), marker) == IndexerStatus::ok);
    // Checked at once, with no waiting: a lane that arrived first and freed afterwards fails here.
    CHECK(marker.expired());
    CHECK(LaneIndexerTestPeer::spent_tasks_waiting(index, 0) == 0);
    CHECK(index.shard_sizes().worker_count == kEvents);
  }
  SUBCASE("a small batch: handed back before the barrier returns, freed by the next push") {
    std::weak_ptr<void> marker;
    REQUIRE(LaneIndexerTestPeer::push_batch_and_flush(index, 0, {make_store_event(1, {1, 2})}, marker) ==
            IndexerStatus::ok);
    CHECK(LaneIndexerTestPeer::spent_tasks_waiting(index, 0) == 3);  // the event and both barriers
    CHECK_FALSE(marker.expired());
    apply(index, make_store_event(2, {1, 2}));
    CHECK(marker.expired());
    flush_and_settle(index);
    assert_score(index, {1, 2}, worker(2, 0), 2);
  }
}
