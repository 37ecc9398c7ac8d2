// Helpers shared by the radix-tree and lane tests: the reference's assert_score / apply_direct
// vocabulary on top of doctest. Header-only; include from *_test.cpp files only.
#pragma once

#include <doctest/doctest.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "libindexer/tree/radix_tree.h"
#include "tests/support/event_builders.h"
#include "tests/support/radix_tree_test_peer.h"

namespace kvidx::testing {

inline WorkerWithDpRank worker(WorkerId id, DpRank rank = 0) { return {id, rank}; }

inline KvCacheStoreData stored_data(const RouterEvent& event) { return std::get<KvCacheStoreData>(event.event.data); }

inline std::optional<std::size_t> worker_lookup_len(const DirectLookup& lookup, WorkerWithDpRank stream) {
  auto it = lookup.find(stream);
  if (it == lookup.end()) return std::nullopt;
  return it->second.size();
}

inline void apply_direct(ConcurrentRadixTree& tree, DirectLookup& lookup, const RouterEvent& event) {
  const ApplyResult result = tree.apply_event(lookup, event);
  INFO("apply_event failed: " << to_string(result.status) << " " << result.error);
  REQUIRE(result.ok());
}

inline std::string describe(const OverlapScores& scores) {
  std::ostringstream out;
  for (const auto& [stream, score] : scores.scores)
    out << "(" << stream.worker_id << "," << stream.dp_rank << ")=" << score << " ";
  return out.str();
}

inline std::optional<std::uint32_t> score_of(const OverlapScores& scores, WorkerWithDpRank stream) {
  auto it = scores.scores.find(stream);
  if (it == scores.scores.end()) return std::nullopt;
  return it->second;
}

inline void assert_direct_score(const ConcurrentRadixTree& tree, const Hashes& query, WorkerWithDpRank stream,
                                std::uint32_t expected) {
  const auto locals = local_hashes(query);
  const OverlapScores scores = tree.find_matches(locals, false);
  INFO("worker=" << stream.worker_id << " rank=" << stream.dp_rank << " scores=" << describe(scores));
  CHECK(score_of(scores, stream) == std::optional<std::uint32_t>{expected});
}

inline void assert_edge_lengths(const ConcurrentRadixTree& tree, const std::vector<std::size_t>& expected) {
  CHECK(RadixTreeTestPeer::edge_lengths_for_test(tree) == expected);
}

inline EdgeTopologyForTest edge_topology(Hashes edge, std::vector<EdgeTopologyForTest> children) {
  return EdgeTopologyForTest{std::move(edge), std::move(children)};
}

}  // namespace kvidx::testing
