// Behaviours where kvidx used to diverge from the reference and the spec (issue 17 §5): a rejected
// Stored changes nothing; a dump keeps a linear chain as one event across pass-through nodes; a node
// that loses its last full holder detaches its unreachable children at once; shard_sizes and
// get_workers are FIFO barriers.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/tree/radix_tree.h"
#include "tests/support/event_builders.h"
#include "tests/support/radix_tree_test_peer.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

ApplyStatus apply_status(ConcurrentRadixTree& tree, DirectLookup& lookup, const RouterEvent& event) {
  const ApplyResult result = tree.apply_event(lookup, event);
  INFO(result.error);
  return result.status;
}

// The statuses of `events`, all from one stream, applied to a fresh tree (with `other` applied
// first, by another stream, to shape the tree).
std::vector<ApplyStatus> statuses(const std::vector<RouterEvent>& other, const std::vector<RouterEvent>& events) {
  ConcurrentRadixTree tree;
  DirectLookup other_lookup;
  for (const auto& event : other) apply_direct(tree, other_lookup, event);
  DirectLookup lookup;
  std::vector<ApplyStatus> out;
  for (const auto& event : events) out.push_back(apply_status(tree, lookup, event));
  return out;
}

}  // namespace

TEST_CASE("a rejected Stored changes nothing: a later Removed of its parent counts as without it") {
  const auto head = remove_hashes_with_parent({}, {1});
  const auto second = remove_hashes_with_parent({1}, {2});
  const auto fourth = remove_hashes_with_parent({1, 2, 3}, {4});
  // Block 2 shares block 1's edge: the cut at 1 leaves a dropped mark for it. Block 4 sits below a
  // split (worker 9's chain): the cut leaves its entry stale. Either way it is known until named.
  const std::vector<RouterEvent> shaping{make_store_event(9, {1, 2, 3, 7})};
  for (const auto& parent : {second, fourth}) {
    CAPTURE(parent.front().value);
    const RouterEvent store = make_store_event(0, {1, 2, 3, 4});
    const RouterEvent cut = remove_event(0, 1, 0, head);
    KvCacheStoreData orphan_data;
    orphan_data.parent_hash = parent.front();
    orphan_data.blocks.push_back(StoredBlock{ExternalSequenceBlockHash{777}, LocalBlockHash{5}});
    const RouterEvent orphan{0, KvCacheEvent{2, orphan_data, 0}, std::nullopt};
    const RouterEvent name_parent = remove_event(0, 3, 0, parent);

    const auto without = statuses(shaping, {store, cut, name_parent});
    const auto with = statuses(shaping, {store, cut, orphan, name_parent});
    REQUIRE(with.size() == 4);
    CHECK(with[2] == ApplyStatus::parent_not_found);
    CHECK(without.back() == ApplyStatus::ok);
    CHECK(with.back() == without.back());
  }
}

TEST_CASE("a dump emits a worker's linear chain as one event across a pass-through node") {
  LaneIndexer index(1);
  REQUIRE(index.enqueue_event(make_store_event(1, {1, 2, 3, 4})) == IndexerStatus::ok);
  REQUIRE(index.enqueue_event(make_store_event(2, {1, 2, 9})) == IndexerStatus::ok);
  // Worker 2 drops its own branch: [1, 2] keeps one held child, [3, 4].
  REQUIRE(index.enqueue_event(make_remove_event_with_parent(2, {1, 2}, {9})) == IndexerStatus::ok);
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(RadixTreeTestPeer::edge_topology_for_test(index.tree()) ==
        std::vector{edge_topology({1, 2}, {edge_topology({3, 4}, {}), edge_topology({9}, {})})});
  const auto expected = snapshot_events({make_store_event(1, {1, 2, 3, 4}), make_store_event(2, {1, 2})});
  auto dumped = index.dump_events();
  REQUIRE(dumped.has_value());
  CHECK(snapshot_events(*dumped) == expected);
  index.tree().run_cleanup();  // the dead [9] goes; the dump does not change
  dumped = index.dump_events();
  REQUIRE(dumped.has_value());
  CHECK(snapshot_events(*dumped) == expected);
}

TEST_CASE("a node that loses its last full holder detaches its unreachable children without waiting for cleanup") {
  ConcurrentRadixTree tree;
  DirectLookup lookup1;
  DirectLookup lookup2;
  apply_direct(tree, lookup1, make_store_event(1, {1, 2, 3, 4, 5}));
  apply_direct(tree, lookup2, make_store_event(2, {1, 2, 3, 6}));
  assert_edge_lengths(tree, {1, 2, 3});
  // [1, 2, 3] keeps full holders: its dead child [6] waits for cleanup, as in the reference.
  apply_direct(tree, lookup2, make_remove_event_with_parent(2, {1, 2, 3}, {6}));
  assert_edge_lengths(tree, {1, 2, 3});
  // Both cut inside [1, 2, 3]: nobody can reach [4, 5] or [6] any more; they go at once.
  apply_direct(tree, lookup1, make_remove_event_with_parent(1, {1}, {2}));
  assert_edge_lengths(tree, {1, 2, 3});  // worker 2 still holds [1, 2, 3] fully
  apply_direct(tree, lookup2, make_remove_event_with_parent(2, {1, 2}, {3}));
  assert_edge_lengths(tree, {3});
  CHECK(tree.node_count() == 1);
  CHECK(tree.attached_block_count() == 3);
  assert_direct_score(tree, {1, 2, 3, 4, 5}, worker(1), 1);
  assert_direct_score(tree, {1, 2, 3, 6}, worker(2), 2);
  // The cut blocks are still known to their streams: naming them is ok, and the lookups drain.
  apply_direct(tree, lookup1, make_remove_event_with_parent(1, {1, 2, 3}, {4, 5}));
  apply_direct(tree, lookup1, make_remove_event_with_parent(1, {}, {1}));
  apply_direct(tree, lookup2, make_remove_event_with_parent(2, {}, {1}));
  CHECK(worker_lookup_len(lookup1, worker(1)) == std::optional<std::size_t>{0});
  CHECK(worker_lookup_len(lookup2, worker(2)) == std::optional<std::size_t>{0});
  // Extending the internal node later makes a new child; it never grows in place again.
  apply_direct(tree, lookup1, make_store_event(1, {1, 2, 3}));
  apply_direct(tree, lookup1, make_store_event_with_parent(1, {1, 2, 3}, {8}));
  assert_edge_lengths(tree, {1, 3});
}

TEST_CASE("shard_sizes and get_workers see every event enqueued before the call") {
  LaneIndexer index(2);
  constexpr WorkerId kWorkers = 64;
  constexpr std::size_t kChains = 40;
  constexpr std::size_t kBlocks = 16;
  std::vector<RouterEvent> burst;
  for (std::size_t c = 0; c < kChains; ++c) {
    for (WorkerId w = 1; w <= kWorkers; ++w) {
      Hashes locals(kBlocks);
      for (std::size_t i = 0; i < kBlocks; ++i) locals[i] = (w * 1'000'000) + (c * 100) + i + 1;
      burst.push_back(make_store_event(w, locals));
    }
  }
  REQUIRE(index.enqueue_events(burst) == IndexerStatus::ok);
  const ShardSizes sizes = index.shard_sizes();
  CHECK(sizes.block_count == kWorkers * kChains * kBlocks);
  CHECK(sizes.worker_count == kWorkers);

  std::vector<RouterEvent> more;
  for (WorkerId w = kWorkers + 1; w <= 2 * kWorkers; ++w) more.push_back(make_store_event(w, {w * 7'000'000}));
  REQUIRE(index.enqueue_events(more) == IndexerStatus::ok);
  const std::vector<WorkerId> workers = index.get_workers();
  CHECK(workers.size() == 2 * kWorkers);
  CHECK(std::is_sorted(workers.begin(), workers.end()));
}
