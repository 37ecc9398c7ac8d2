// Ports of the reference's ConcurrentRadixTreeCompressed tests that drive the tree directly (each
// test owns its per-stream lookups, as a lane would). Same names, scenarios and numbers.
#include <doctest/doctest.h>

#include <barrier>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "libindexer/tree/radix_tree.h"
#include "tests/support/event_builders.h"
#include "tests/support/radix_tree_test_peer.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

DirectLookup direct_lookup() { return {}; }

// Applies two events from two threads released together by a barrier; returns both lookups.
std::pair<DirectLookup, DirectLookup> race_two_events(ConcurrentRadixTree& index, DirectLookup left_lookup,
                                                      const RouterEvent& left_event, DirectLookup right_lookup,
                                                      const RouterEvent& right_event) {
  std::barrier start(3);
  std::thread left([&] {
    start.arrive_and_wait();
    apply_direct(index, left_lookup, left_event);
  });
  std::thread right([&] {
    start.arrive_and_wait();
    apply_direct(index, right_lookup, right_event);
  });
  start.arrive_and_wait();
  left.join();
  right.join();
  return {std::move(left_lookup), std::move(right_lookup)};
}

}  // namespace

// ---- race_tests::store ----

TEST_CASE("race_divergent_tail_extensions_split_compressed_leaf") {
  ConcurrentRadixTree index;
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3, 4}));

  auto [after1, after2] =
      race_two_events(index, std::move(lookup1), make_store_event_with_parent(1, {1, 2, 3, 4}, {5, 6}),
                      std::move(lookup2), make_store_event_with_parent(2, {1, 2, 3, 4}, {7, 8}));

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 3);
  assert_edge_lengths(index, {2, 2, 4});
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker2, 4);
  assert_direct_score(index, {1, 2, 3, 4, 7, 8}, worker1, 4);
  assert_direct_score(index, {1, 2, 3, 4, 7, 8}, worker2, 6);
  CHECK(worker_lookup_len(after1, worker1) == std::optional<std::size_t>{6});
  CHECK(worker_lookup_len(after2, worker2) == std::optional<std::size_t>{6});
}

TEST_CASE("race_identical_tail_extensions_stay_compressed") {
  ConcurrentRadixTree index;
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3, 4}));

  auto [after1, after2] =
      race_two_events(index, std::move(lookup1), make_store_event_with_parent(1, {1, 2, 3, 4}, {5, 6}),
                      std::move(lookup2), make_store_event_with_parent(2, {1, 2, 3, 4}, {5, 6}));

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 1);
  assert_edge_lengths(index, {6});
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker2, 6);
  CHECK(worker_lookup_len(after1, worker1) == std::optional<std::size_t>{6});
  CHECK(worker_lookup_len(after2, worker2) == std::optional<std::size_t>{6});
}

TEST_CASE("race_suffix_reuse_with_divergent_split_preserves_workers") {
  ConcurrentRadixTree index;
  const auto worker0 = worker(0);
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  auto lookup0 = direct_lookup();
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  apply_direct(index, lookup0, make_store_event(0, {1, 2, 3, 4, 5, 6}));
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3}));

  race_two_events(index, std::move(lookup1), make_store_event_with_parent(1, {1, 2, 3}, {4, 5, 6}), std::move(lookup2),
                  make_store_event_with_parent(2, {1, 2, 3}, {7, 8}));

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 3);
  assert_edge_lengths(index, {2, 3, 3});
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker2, 3);
  assert_direct_score(index, {1, 2, 3, 7, 8}, worker0, 3);
  assert_direct_score(index, {1, 2, 3, 7, 8}, worker1, 3);
  assert_direct_score(index, {1, 2, 3, 7, 8}, worker2, 5);
}

TEST_CASE("stale_scan_cannot_commit_after_split") {
  ConcurrentRadixTree index;
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  const auto worker3 = worker(3);
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  auto lookup3 = direct_lookup();
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4, 5, 6}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3, 4, 5, 6}));

  NodeRef node = RadixTreeTestPeer::root(index).child_snapshot(LocalBlockHash{1});
  REQUIRE(node);
  const auto blocks = stored_data(make_store_event(3, {1, 2, 3, 4, 5, 6})).blocks;
  const StorePrefixScan stale_scan = node->scan_store_prefix(blocks);
  CHECK(stale_scan.matched == 6);

  apply_direct(index, lookup2, make_store_event_with_parent(2, {1, 2, 3}, {7}));

  CHECK_FALSE(
      node->promote_to_full_with_version(RadixTreeTestPeer::slot_for_test(index, worker3), stale_scan.shape_version)
          .has_value());

  apply_direct(index, lookup3, make_store_event(3, {1, 2, 3, 4, 5, 6}));

  CHECK(RadixTreeTestPeer::edge_topology_for_test(index) ==
        std::vector{edge_topology({1, 2, 3}, {edge_topology({4, 5, 6}, {}), edge_topology({7}, {})})});
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker2, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker3, 6);
}

TEST_CASE("tail_parent_split_before_child_lookup_repairs_to_suffix") {
  ConcurrentRadixTree index;
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  const auto worker3 = worker(3);
  const auto worker4 = worker(4);
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  auto lookup3 = direct_lookup();
  auto lookup4 = direct_lookup();
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3, 4}));
  apply_direct(index, lookup3, make_store_event(3, {1, 2, 3, 4}));
  apply_direct(index, lookup4, make_store_event(4, {1, 2, 3, 4}));
  apply_direct(index, lookup1, make_store_event_with_parent(1, {1, 2, 3, 4}, {5, 6}));
  apply_direct(index, lookup2, make_store_event_with_parent(2, {1, 2, 3, 4}, {7, 8}));

  NodeRef stale_parent = RadixTreeTestPeer::root(index).child_snapshot(LocalBlockHash{1});
  REQUIRE(stale_parent);
  const auto continuation = stored_data(make_store_event_with_parent(3, {1, 2, 3, 4}, {9}));
  REQUIRE(continuation.parent_hash.has_value());
  const auto parent_hash = *continuation.parent_hash;
  const auto plan = stale_parent->plan_store_parent_edge(parent_hash, continuation.blocks);
  REQUIRE(plan.has_value());
  CHECK(plan->action == ParentEdgePlanAction::insert_from_parent);

  apply_direct(index, lookup4, make_store_event_with_parent(4, {1, 2}, {10}));

  const ApplyResult inserted = RadixTreeTestPeer::insert_blocks_from_for_test(index, lookup3, worker3, stale_parent,
                                                                              parent_hash, continuation.blocks);
  REQUIRE(inserted.ok());

  CHECK(RadixTreeTestPeer::edge_topology_for_test(index) ==
        std::vector{edge_topology({1, 2}, {edge_topology({3, 4}, {edge_topology({5, 6}, {}), edge_topology({7, 8}, {}),
                                                                  edge_topology({9}, {})}),
                                           edge_topology({10}, {})})});
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_direct_score(index, {1, 2, 3, 4, 7, 8}, worker2, 6);
  assert_direct_score(index, {1, 2, 3, 4, 9}, worker3, 5);
  assert_direct_score(index, {1, 2, 9}, worker3, 2);
  assert_direct_score(index, {1, 2, 10}, worker4, 3);
}

TEST_CASE("stale_tail_cursor_replans_before_descending_same_local_child") {
  ConcurrentRadixTree index;
  const auto worker_a = worker(1);
  const auto worker_b = worker(2);
  auto lookup_a = direct_lookup();
  auto lookup_b = direct_lookup();
  apply_direct(index, lookup_a, make_store_event(1, {1}));
  apply_direct(index, lookup_b, make_store_event(2, {1}));

  NodeRef stale_parent = RadixTreeTestPeer::root(index).child_snapshot(LocalBlockHash{1});
  REQUIRE(stale_parent);
  const auto continuation = stored_data(make_store_event_with_parent(1, {1}, {7}));
  REQUIRE(continuation.parent_hash.has_value());
  const auto parent_hash = *continuation.parent_hash;
  const auto plan = stale_parent->plan_store_parent_edge(parent_hash, continuation.blocks);
  REQUIRE(plan.has_value());
  const ParentEdgeStep step = stale_parent->apply_store_parent_edge_plan(
      RadixTreeTestPeer::slot_for_test(index, worker_a), *plan, continuation.blocks);
  CHECK(step.action == ParentEdgeAction::insert_from_parent);
  CHECK_FALSE(step.child);

  const auto b_extension = make_store_event_with_parent(2, {1}, {5, 6, 7});
  const auto b_extension_data = stored_data(b_extension);
  // The same local child must have distinct sequence hashes at different depths.
  CHECK(continuation.blocks[0].block_hash != b_extension_data.blocks[2].block_hash);
  apply_direct(index, lookup_b, b_extension);
  apply_direct(index, lookup_b, make_store_event_with_parent(2, {1, 5, 6}, {8}));

  const ApplyResult inserted = RadixTreeTestPeer::insert_blocks_from_for_test(index, lookup_a, worker_a, stale_parent,
                                                                              parent_hash, continuation.blocks);
  REQUIRE(inserted.ok());

  assert_direct_score(index, {1, 7}, worker_a, 2);
  assert_direct_score(index, {1, 5, 6, 7}, worker_b, 4);
  assert_direct_score(index, {1, 5, 6, 8}, worker_b, 4);
  CHECK(RadixTreeTestPeer::edge_topology_for_test(index) ==
        std::vector{edge_topology(
            {1}, {edge_topology({5, 6}, {edge_topology({7}, {}), edge_topology({8}, {})}), edge_topology({7}, {})})});
}

// ---- race_tests::remove ----

TEST_CASE("race_split_with_remove_repairs_stale_lookup_on_restore") {
  ConcurrentRadixTree index;
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3, 4}));

  auto [after1, after2] = race_two_events(index, std::move(lookup1), make_store_event_with_parent(1, {1, 2}, {7}),
                                          std::move(lookup2), make_remove_event_with_parent(2, {1, 2}, {3}));

  assert_direct_score(index, {1, 2, 7}, worker1, 3);
  assert_direct_score(index, {1, 2, 3, 4}, worker2, 2);

  apply_direct(index, after2, make_store_event_with_parent(2, {1, 2}, {3, 4}));

  assert_direct_score(index, {1, 2, 3, 4}, worker2, 4);
}

TEST_CASE("race_remove_keeps_children_needed_by_another_full_worker") {
  ConcurrentRadixTree index;
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  const auto worker3 = worker(3);
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  auto lookup3 = direct_lookup();
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3, 4}));
  apply_direct(index, lookup1, make_store_event_with_parent(1, {1, 2, 3, 4}, {5, 6}));
  apply_direct(index, lookup3, make_store_event(3, {1, 2, 3, 4}));
  apply_direct(index, lookup3, make_store_event_with_parent(3, {1, 2, 3, 4}, {7, 8}));

  std::barrier start(3);
  std::thread reader([&] {
    start.arrive_and_wait();
    for (int i = 0; i < 256; ++i) assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  });
  std::thread remover([&] {
    start.arrive_and_wait();
    apply_direct(index, lookup2, make_remove_event_with_parent(2, {1}, {2}));
  });
  start.arrive_and_wait();
  reader.join();
  remover.join();

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 3);
  assert_edge_lengths(index, {2, 2, 4});
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_direct_score(index, {1, 2, 3, 4}, worker2, 1);
  assert_direct_score(index, {1, 2, 3, 4, 7, 8}, worker3, 6);
}

// ---- race_tests::clear ----

TEST_CASE("clear_before_split_prevents_copying_removed_coverage") {
  ConcurrentRadixTree index;
  const auto worker_a = worker(1);
  const auto worker_b = worker(2);
  auto lookup_a = direct_lookup();
  auto lookup_b = direct_lookup();
  apply_direct(index, lookup_a, make_store_event(1, {1, 2}));
  apply_direct(index, lookup_b, make_store_event(2, {1, 2}));
  apply_direct(index, lookup_a, make_clear_event_with_dp_rank(1, 0));
  apply_direct(index, lookup_b, make_store_event_with_parent(2, {1}, {3}));
  apply_direct(index, lookup_a, make_store_event(1, {1}));

  assert_direct_score(index, {1, 2}, worker_a, 1);
  assert_direct_score(index, {1, 2}, worker_b, 2);
  assert_direct_score(index, {1, 3}, worker_b, 2);
}

// ---- race_tests::cleanup ----

TEST_CASE("race_cleanup_with_dead_child_reuse_keeps_restored_child") {
  ConcurrentRadixTree index;
  const auto worker0 = worker(0);
  auto lookup = direct_lookup();
  apply_direct(index, lookup, make_store_event(0, {1, 2, 3}));
  apply_direct(index, lookup, make_store_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply_direct(index, lookup, make_store_event_with_parent(0, {1, 2, 3}, {6, 7}));
  apply_direct(index, lookup, make_remove_event_with_parent(0, {1, 2, 3}, {4, 5}));
  apply_direct(index, lookup, make_remove_event_with_parent(0, {1, 2, 3}, {6, 7}));

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 3);
  assert_direct_score(index, {1, 2, 3}, worker0, 3);

  std::barrier start(3);
  std::thread cleanup([&] {
    start.arrive_and_wait();
    RadixTreeTestPeer::run_cleanup_for_test(index);
  });
  std::thread store([&] {
    start.arrive_and_wait();
    apply_direct(index, lookup, make_store_event_with_parent(0, {1, 2, 3}, {4, 5}));
  });
  start.arrive_and_wait();
  cleanup.join();
  store.join();

  const auto edge_lengths = RadixTreeTestPeer::edge_lengths_for_test(index);
  INFO("edge lengths: " << edge_lengths.size());
  CHECK((edge_lengths == std::vector<std::size_t>{5} || edge_lengths == std::vector<std::size_t>{2, 3}));
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == edge_lengths.size());
  assert_direct_score(index, {1, 2, 3, 4, 5}, worker0, 5);
}

// ---- race_tests::read ----

TEST_CASE("race_find_during_split_never_overcounts") {
  ConcurrentRadixTree index;
  const std::vector<std::pair<WorkerWithDpRank, Hashes>> branches{
      {worker(1), {5, 6}}, {worker(2), {7, 8}}, {worker(3), {9, 10}}, {worker(4), {11, 12}}};
  std::vector<DirectLookup> lookups(branches.size());
  for (std::size_t i = 0; i < branches.size(); ++i) {
    apply_direct(index, lookups[i], make_store_event(branches[i].first.worker_id, {1, 2, 3, 4}));
  }

  std::barrier start(static_cast<std::ptrdiff_t>(branches.size() + 2));
  std::thread reader([&] {
    start.arrive_and_wait();
    for (int round = 0; round < 512; ++round) {
      for (const auto& [branch_worker, suffix] : branches) {
        Hashes query{1, 2, 3, 4};
        query.insert(query.end(), suffix.begin(), suffix.end());
        const auto scores = index.find_matches(local_hashes(query), false);
        for (const auto& [score_worker, score] : scores.scores) {
          const std::uint32_t max_expected = score_worker == branch_worker ? 6 : 4;
          REQUIRE(score <= query.size());
          REQUIRE(score <= max_expected);
        }
      }
    }
  });
  std::vector<std::thread> writers;
  for (std::size_t i = 0; i < branches.size(); ++i) {
    writers.emplace_back([&, i] {
      start.arrive_and_wait();
      apply_direct(index, lookups[i],
                   make_store_event_with_parent(branches[i].first.worker_id, {1, 2, 3, 4}, branches[i].second));
    });
  }
  start.arrive_and_wait();
  for (auto& writer : writers) writer.join();
  reader.join();

  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 5);
  assert_edge_lengths(index, {2, 2, 2, 2, 4});
  for (const auto& [branch_worker, suffix] : branches) {
    Hashes query{1, 2, 3, 4};
    query.insert(query.end(), suffix.begin(), suffix.end());
    for (const auto& [other_worker, other_suffix] : branches) {
      assert_direct_score(index, query, other_worker, other_worker == branch_worker ? 6 : 4);
    }
  }
}

// ---- remove_tests ----

TEST_CASE("remove_multiple_hashes_from_same_compressed_edge") {
  ConcurrentRadixTree index;
  const auto worker0 = worker(0);
  const auto worker1 = worker(1);
  auto lookup0 = direct_lookup();
  auto lookup1 = direct_lookup();
  apply_direct(index, lookup0, make_store_event(0, {1, 2, 3, 4, 5, 6}));
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4, 5, 6}));
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);

  apply_direct(index, lookup0, make_remove_event_with_parent(0, {1, 2}, {3, 4, 5}));
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 2);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);

  apply_direct(index, lookup0, make_store_event_with_parent(0, {1, 2}, {3, 4, 5, 6}));
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
}

TEST_CASE("batched_remove_uses_minimum_edge_position_not_event_order") {
  ConcurrentRadixTree index;
  const auto worker0 = worker(0);
  const auto worker1 = worker(1);
  auto lookup0 = direct_lookup();
  auto lookup1 = direct_lookup();
  apply_direct(index, lookup0, make_store_event(0, {1, 2, 3, 4, 5, 6}));
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4, 5, 6}));

  const auto hashes = remove_hashes_with_parent({1, 2}, {3, 4, 5});
  apply_direct(index, lookup0, remove_event(0, 0, 0, {hashes[2], hashes[0], hashes[1]}));

  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 2);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  CHECK(worker_lookup_len(lookup0, worker0) == std::optional<std::size_t>{2});

  apply_direct(index, lookup0, make_store_event_with_parent(0, {1, 2}, {3, 4, 5, 6}));
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 6);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  CHECK(worker_lookup_len(lookup0, worker0) == std::optional<std::size_t>{6});
}

TEST_CASE("batched_remove_processes_hashes_moved_by_split_before_restore") {
  ConcurrentRadixTree index;
  const auto worker0 = worker(0);
  const auto worker1 = worker(1);
  auto lookup0 = direct_lookup();
  auto lookup1 = direct_lookup();
  apply_direct(index, lookup0, make_store_event(0, {1, 2, 3, 4, 5, 6}));
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4, 5, 6}));
  const auto hashes = remove_hashes_with_parent({1, 2}, {3, 4, 5});
  const LookupEntry* group_entry = lookup0.at(worker0).find(hashes[0]);
  REQUIRE(group_entry != nullptr);
  const NodeRef group_node = group_entry->node;

  apply_direct(index, lookup1, make_store_event_with_parent(1, {1, 2, 3}, {7}));
  CHECK(RadixTreeTestPeer::edge_topology_for_test(index) ==
        std::vector{edge_topology({1, 2, 3}, {edge_topology({4, 5, 6}, {}), edge_topology({7}, {})})});

  RadixTreeTestPeer::apply_removed_group(index, lookup0, worker0, group_node, hashes, 42);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 2);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);

  apply_direct(index, lookup0, make_store_event_with_parent(0, {1, 2}, {3}));
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 3);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  CHECK(worker_lookup_len(lookup0, worker0) == std::optional<std::size_t>{3});
}

TEST_CASE("batched_remove_falls_back_when_all_grouped_hashes_move_before_restore") {
  ConcurrentRadixTree index;
  const auto worker0 = worker(0);
  const auto worker1 = worker(1);
  auto lookup0 = direct_lookup();
  auto lookup1 = direct_lookup();
  apply_direct(index, lookup0, make_store_event(0, {1, 2, 3, 4, 5, 6}));
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4, 5, 6}));
  const auto hashes = remove_hashes_with_parent({1, 2, 3}, {4, 5});
  const LookupEntry* group_entry = lookup0.at(worker0).find(hashes[0]);
  REQUIRE(group_entry != nullptr);
  const NodeRef group_node = group_entry->node;

  apply_direct(index, lookup1, make_store_event_with_parent(1, {1, 2, 3}, {7}));
  CHECK(RadixTreeTestPeer::edge_topology_for_test(index) ==
        std::vector{edge_topology({1, 2, 3}, {edge_topology({4, 5, 6}, {}), edge_topology({7}, {})})});

  RadixTreeTestPeer::apply_removed_group(index, lookup0, worker0, group_node, hashes, 42);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 3);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  CHECK(worker_lookup_len(lookup0, worker0) == std::optional<std::size_t>{3});

  apply_direct(index, lookup0, make_store_event_with_parent(0, {1, 2, 3}, {4}));
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker0, 4);
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  CHECK(worker_lookup_len(lookup0, worker0) == std::optional<std::size_t>{4});
}

// kvidx: apply_removed checks a run of one edge's blocks under one lock and cuts once per node.
// Whatever the order of the hashes and wherever splits put the edges, one Removed naming blocks
// must leave what one Removed per block leaves: the same scores, and the same blocks known to the
// stream (an entry or a dropped mark each; which of the two depends on the order, see WorkerLookup).
TEST_CASE("one Removed naming blocks of split edges in any order equals one Removed per block") {
  const Hashes chain{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const auto hashes = external_hashes({}, chain);
  // Blocks 3 and 8 (depths 3 and 8) sit in different nodes once worker 1's chain splits at 5.
  // Runs of one node in both orders (9 then 8, 4 then 3), and nodes taking turns.
  const std::vector<ExternalSequenceBlockHash> named{hashes[9], hashes[8], hashes[4], hashes[3], hashes[6]};
  struct Outcome {
    std::uint32_t score0 = 0;
    std::uint32_t score1 = 0;
    std::optional<std::size_t> entries;
    std::size_t dropped = 0;
  };
  auto run = [&](bool one_event) {
    ConcurrentRadixTree index;
    auto lookup = direct_lookup();
    apply_direct(index, lookup, make_store_event(0, chain));
    apply_direct(index, lookup, make_store_event(1, {1, 2, 3, 4, 5}));
    apply_direct(index, lookup, make_store_event_with_parent(1, {1, 2, 3, 4, 5}, {60}));
    if (one_event) {
      CHECK(index.apply_event(lookup, remove_event(0, 1, 0, named)).ok());
    } else {
      for (const auto hash : named) CHECK(index.apply_event(lookup, remove_event(0, 1, 0, {hash})).ok());
    }
    const auto scores = index.find_matches(local_hashes(chain), false).scores;
    Outcome out;
    out.score0 = scores.contains(worker(0)) ? scores.at(worker(0)) : 0;
    out.score1 = scores.contains(worker(1)) ? scores.at(worker(1)) : 0;
    out.entries = worker_lookup_len(lookup, worker(0));
    out.dropped = lookup.at(worker(0)).dropped_size();
    // The blocks cut without being named are still known to the stream: naming them is not an error.
    CHECK(index.apply_event(lookup, remove_event(0, 2, 0, {hashes[5], hashes[7]})).ok());
    return out;
  };
  const Outcome batched = run(true);
  const Outcome single = run(false);
  CHECK(batched.score0 == 3);
  CHECK(batched.score1 == 5);
  CHECK(batched.score0 == single.score0);
  CHECK(batched.score1 == single.score1);
  // Known and not named: blocks 0-2 (held), 5 and 7 (cut below block 3).
  CHECK(batched.entries.value_or(0) + batched.dropped == 5);
  CHECK(single.entries.value_or(0) + single.dropped == 5);
}

// ---- structural_tests ----

TEST_CASE("test_internal_split_reparents_existing_children_to_suffix") {
  ConcurrentRadixTree index;
  const auto worker1 = worker(1);
  const auto worker2 = worker(2);
  const auto worker3 = worker(3);
  auto lookup1 = direct_lookup();
  auto lookup2 = direct_lookup();
  auto lookup3 = direct_lookup();
  apply_direct(index, lookup1, make_store_event(1, {1, 2, 3, 4}));
  apply_direct(index, lookup2, make_store_event(2, {1, 2, 3, 4}));
  apply_direct(index, lookup1, make_store_event_with_parent(1, {1, 2, 3, 4}, {5, 6}));
  apply_direct(index, lookup2, make_store_event_with_parent(2, {1, 2, 3, 4}, {7, 8}));

  CHECK(RadixTreeTestPeer::edge_topology_for_test(index) ==
        std::vector{edge_topology({1, 2, 3, 4}, {edge_topology({5, 6}, {}), edge_topology({7, 8}, {})})});

  apply_direct(index, lookup3, make_store_event(3, {1, 2, 3, 4}));
  apply_direct(index, lookup3, make_store_event_with_parent(3, {1, 2}, {9}));

  CHECK(
      RadixTreeTestPeer::edge_topology_for_test(index) ==
      std::vector{edge_topology({1, 2}, {edge_topology({3, 4}, {edge_topology({5, 6}, {}), edge_topology({7, 8}, {})}),
                                         edge_topology({9}, {})})});
  assert_direct_score(index, {1, 2, 3, 4, 5, 6}, worker1, 6);
  assert_direct_score(index, {1, 2, 3, 4, 7, 8}, worker2, 6);
  assert_direct_score(index, {1, 2, 9}, worker3, 3);
}

// ---- lookup leak regression (split + dead children + lazy repair) ----

TEST_CASE("remove_after_split_and_children_clear_scrubs_lookup") {
  ConcurrentRadixTree index;
  const auto w1 = worker(1);
  const auto w2 = worker(2);
  auto l1 = direct_lookup();
  auto l2 = direct_lookup();

  apply_direct(index, l1, make_store_event(1, {1, 2, 3, 4}));
  CHECK(worker_lookup_len(l1, w1) == std::optional<std::size_t>{4});

  // w2 shares [1,2] and diverges: the edge splits after two blocks and w1's entries for 3 and 4
  // now name the prefix node although the blocks live in the suffix.
  apply_direct(index, l2, make_store_event(2, {1, 2, 9}));

  const auto head = remove_hashes_with_parent({}, {1, 2});
  apply_direct(index, l1, remove_event(1, 100, 0, {head[0], head[1]}));
  apply_direct(index, l2, remove_event(2, 101, 0, {head[0], head[1]}));

  // w1 no longer holds the suffix but its entries for it are still there (stale by design).
  CHECK(worker_lookup_len(l1, w1) == std::optional<std::size_t>{2});

  // The engine evicts the suffix blocks and says so: every entry must go.
  apply_direct(index, l1, remove_event(1, 102, 0, remove_hashes_with_parent({1, 2}, {3, 4})));
  CHECK(worker_lookup_len(l1, w1) == std::optional<std::size_t>{0});

  apply_direct(index, l2, remove_event(2, 103, 0, remove_hashes_with_parent({1, 2}, {9})));
  CHECK(worker_lookup_len(l2, w2) == std::optional<std::size_t>{0});
  CHECK(index.block_count(w1) == 0);
  CHECK(index.block_count(w2) == 0);
}

// ---- kvidx: beyond the reference's tests ----

TEST_CASE("ten thousand streams share one edge, split it and drain back to an empty tree") {
  ConcurrentRadixTree index;
  DirectLookup lookup;
  constexpr WorkerId kWorkers = 5'000;
  for (WorkerId w = 0; w < kWorkers; ++w) {
    for (DpRank r = 0; r < 2; ++r) apply_direct(index, lookup, make_store_event_with_dp_rank(w, {1, 2, 3, 4}, r));
  }
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 1);
  // One stream diverges in the middle of the shared edge: all 10,000 holders move with the split.
  apply_direct(index, lookup, make_store_event_with_parent(17, {1, 2}, {9}));
  assert_edge_lengths(index, {1, 2, 2});

  const auto scores = index.find_matches(local_hashes({1, 2, 3, 4}), false);
  REQUIRE(scores.scores.size() == 2 * kWorkers);
  for (const auto& [stream, score] : scores.scores) CHECK(score == 4);
  REQUIRE(scores.frequencies.size() == 4);
  CHECK(scores.frequencies[3] == 2 * kWorkers);
  assert_direct_score(index, {1, 2, 9}, worker(17), 3);
  assert_direct_score(index, {1, 2, 9}, worker(18), 2);

  for (WorkerId w = 0; w < kWorkers; ++w) index.remove_worker_sweep(w);
  CHECK(index.find_matches(local_hashes({1, 2, 3, 4}), false).scores.empty());
  RadixTreeTestPeer::run_cleanup_for_test(index);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 0);
  CHECK(index.node_count() == 0);
}

TEST_CASE("early exit stops once a single stream still matches") {
  ConcurrentRadixTree index;
  DirectLookup lookup;
  apply_direct(index, lookup, make_store_event(1, {1, 2}));
  apply_direct(index, lookup, make_store_event(2, {1, 2, 3, 4}));
  apply_direct(index, lookup, make_store_event_with_parent(2, {1, 2, 3, 4}, {5}));
  apply_direct(index, lookup, make_store_event(3, {1, 2, 3, 4, 6}));

  const auto full = index.find_matches(local_hashes({1, 2, 3, 4, 5}), false);
  CHECK(score_of(full, worker(2)) == std::optional<std::uint32_t>{5});
  CHECK(full.frequencies == std::vector<std::size_t>{3, 3, 2, 2, 1});
  CHECK(full.tree_sizes.at(worker(2)) == 5);

  const auto early = index.find_matches(local_hashes({1, 2, 3, 4, 5}), true);
  CHECK(score_of(early, worker(1)) == std::optional<std::uint32_t>{2});
  CHECK(score_of(early, worker(3)) == std::optional<std::uint32_t>{4});
  CHECK(score_of(early, worker(2)).value_or(0) <= 5);
}

TEST_CASE("bad input is reported as a value and changes nothing") {
  ConcurrentRadixTree index;
  DirectLookup lookup;
  apply_direct(index, lookup, make_store_event(1, {1, 2}));

  const auto orphan = index.apply_event(lookup, make_store_event_with_parent(1, {7, 8}, {3}));
  CHECK(orphan.status == ApplyStatus::parent_not_found);
  CHECK_FALSE(orphan.error.empty());

  RouterEvent empty_store = make_store_event(1, {1});
  std::get<KvCacheStoreData>(empty_store.event.data).blocks.clear();
  CHECK(index.apply_event(lookup, empty_store).status == ApplyStatus::invalid);

  const auto unknown = index.apply_event(lookup, remove_event(1, 5, 0, {ExternalSequenceBlockHash{123456}}));
  CHECK(unknown.status == ApplyStatus::block_not_found);

  CHECK(index.block_count(worker(1)) == 2);
  assert_direct_score(index, {1, 2, 3}, worker(1), 2);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index) == 1);
}
