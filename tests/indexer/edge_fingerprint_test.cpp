// Edge fingerprints (libindexer/tree/edge_fingerprint.h): a run that differs in any one block, or
// in order, has another fingerprint; fingerprints add up across a split; and find_matches, which
// trusts a fingerprint match for a whole edge, still scores queries that leave an edge midway.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "libindexer/tree/edge_fingerprint.h"
#include "libindexer/tree/radix_tree.h"
#include "tests/support/event_builders.h"
#include "tests/support/radix_tree_test_peer.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

std::vector<LocalBlockHash> locals_of(std::initializer_list<std::uint64_t> values) {
  std::vector<LocalBlockHash> out;
  for (const auto v : values) out.push_back(LocalBlockHash{v});
  return out;
}

std::vector<EdgeBlock> edge_of(const std::vector<LocalBlockHash>& locals) {
  std::vector<EdgeBlock> out;
  for (const auto local : locals) out.push_back(EdgeBlock{local, ExternalSequenceBlockHash{local.value + 7}});
  return out;
}

}  // namespace

TEST_CASE("an edge fingerprint changes with any one block and with the blocks' order") {
  std::mt19937_64 rng(20261206);
  for (int round = 0; round < 2'000; ++round) {
    std::vector<LocalBlockHash> run(1 + rng() % 64);
    for (auto& local : run) local = LocalBlockHash{rng()};
    const auto depth = static_cast<std::uint32_t>(rng() % 1'000);
    const std::uint64_t before = query_fingerprint(run, depth);
    REQUIRE(edge_fingerprint(edge_of(run), depth) == before);  // edges and queries agree
    auto changed = run;
    changed[rng() % changed.size()].value ^= 1ULL << (rng() % 64);
    CHECK(query_fingerprint(changed, depth) != before);  // one block: a bijection per depth
    CHECK(query_fingerprint(run, depth + 1) != before);  // the same blocks one level deeper
  }
  CHECK(query_fingerprint(locals_of({1, 2}), 5) != query_fingerprint(locals_of({2, 1}), 5));
  CHECK(query_fingerprint(locals_of({7, 7, 9}), 0) != query_fingerprint(locals_of({7, 9, 7}), 0));
}

TEST_CASE("an edge fingerprint is the sum of its parts' at their own depths") {
  const auto whole = locals_of({11, 12, 13, 14, 15, 16});
  for (std::uint32_t keep = 0; keep <= whole.size(); ++keep) {
    const std::span<const LocalBlockHash> all(whole);
    CHECK(query_fingerprint(all, 3) ==
          query_fingerprint(all.first(keep), 3) + query_fingerprint(all.subspan(keep), 3 + keep));
  }
  CHECK(query_fingerprint({}, 9) == 0);  // an empty edge (a freed one) sums to nothing
}

TEST_CASE("a run's fingerprint is the sum of its blocks' terms, each at its own depth") {
  // The run steps its depth key by addition; a grown edge adds fingerprint_term per new block.
  // Both must give the same sum, or an edge grown in place would stop matching its queries.
  std::mt19937_64 rng(20261207);
  for (int round = 0; round < 500; ++round) {
    std::vector<LocalBlockHash> run(rng() % 200);
    for (auto& local : run) local = LocalBlockHash{rng() % 4 == 0 ? rng() % 16 : rng()};
    const auto depth = static_cast<std::uint32_t>(rng() % 100'000);
    std::uint64_t terms = 0;
    for (std::uint32_t i = 0; i < run.size(); ++i) terms += fingerprint_term(run[i], depth + i);
    CHECK(query_fingerprint(run, depth) == terms);
  }
}

TEST_CASE("a long query's fingerprint, vectorised where the CPU allows, is the same sum at every length") {
  // Runs of kLongQueryRun blocks or more take the out-of-line version (a vector body, a scalar
  // tail); every length around and past the switch must sum what the edges' scalar loop sums.
  std::mt19937_64 rng(20261208);
  std::vector<LocalBlockHash> run(300);
  for (auto& local : run) local = LocalBlockHash{rng()};
  for (const std::uint32_t depth : {0U, 31U, 100'003U, 4'000'000'000U}) {
    std::uint64_t terms = 0;
    for (std::uint32_t length = 0; length <= run.size(); ++length) {
      const std::span<const LocalBlockHash> prefix(run.data(), length);
      INFO("depth " << depth << " length " << length);
      REQUIRE(query_fingerprint(prefix, depth) == terms);
      REQUIRE(edge_fingerprint(edge_of({prefix.begin(), prefix.end()}), depth) == terms);  // edges sum scalar
      if (length < run.size()) terms += fingerprint_term(run[length], depth + length);
    }
  }
}

TEST_CASE("find_matches scores a query that leaves a long edge midway, by a changed block or a swapped pair") {
  ConcurrentRadixTree tree;
  DirectLookup lookup;
  apply_direct(tree, lookup, make_store_event(1, {1, 2, 3, 4, 5, 6, 7, 8}));
  assert_edge_lengths(tree, {8});

  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 7, 8}, worker(1), 8);
  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, worker(1), 8);  // runs past the edge
  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 7, 99}, worker(1), 7);        // last block differs
  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 99, 8}, worker(1), 6);
  assert_direct_score(tree, {1, 2, 3, 5, 4, 6, 7, 8}, worker(1), 3);  // swapped pair, same sum of blocks
  assert_direct_score(tree, {1, 2, 3, 4}, worker(1), 4);              // ends inside the edge
}

TEST_CASE("edges grown in place, split and merged keep fingerprints that match whole queries") {
  ConcurrentRadixTree tree;
  DirectLookup lookup;
  apply_direct(tree, lookup, make_store_event(1, {1, 2, 3, 4}));
  apply_direct(tree, lookup, make_store_event_with_parent(1, {1, 2, 3, 4}, {5, 6, 7, 8}));  // grows in place
  assert_edge_lengths(tree, {8});
  CHECK(RadixTreeTestPeer::stale_fingerprints(tree) == 0);
  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 7, 8, 9}, worker(1), 8);

  apply_direct(tree, lookup, make_store_event(2, {1, 2, 3, 40, 50}));  // splits [1..8] after 3
  assert_edge_lengths(tree, {2, 3, 5});
  CHECK(RadixTreeTestPeer::stale_fingerprints(tree) == 0);
  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 7, 8}, worker(1), 8);
  assert_direct_score(tree, {1, 2, 3, 40, 50}, worker(2), 5);
  assert_direct_score(tree, {1, 2, 3, 40, 50}, worker(1), 3);

  apply_direct(tree, lookup, make_remove_event_with_parent(2, {}, {1, 2, 3, 40, 50}));  // worker 2 leaves
  RadixTreeTestPeer::run_cleanup_for_test(tree);  // the only child [4..8] folds back into [1,2,3]
  assert_edge_lengths(tree, {8});
  CHECK(RadixTreeTestPeer::stale_fingerprints(tree) == 0);
  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 7, 8}, worker(1), 8);
  assert_direct_score(tree, {1, 2, 3, 4, 5, 6, 7, 80}, worker(1), 7);
}
