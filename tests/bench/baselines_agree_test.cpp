// The bench's baselines answer the same scores as the real index and the test's reference index,
// so a bench row compares speed and memory of correct indexes. Synthetic workloads (build + churn)
// for both fleets: engines that share hashes and engines that each hash their own way.
#include <doctest/doctest.h>

#include <map>

#include "bench/baselines/flat_hash_index.h"
#include "bench/baselines/mutex_radix_tree.h"
#include "bench/baselines/positional_index.h"
#include "bench/common/workloads.h"
#include "libindexer/tree/radix_tree.h"
#include "tests/support/reference_index.h"

namespace {

using namespace kvidx;
using namespace kvidx::bench;

std::map<WorkerWithDpRank, std::uint32_t> sorted(const OverlapScores& s) {
  std::map<WorkerWithDpRank, std::uint32_t> out;
  for (const auto& [stream, score] : s.scores) out[stream] = score;
  return out;
}

SyntheticWorkload small_workload(bool per_engine_hashes) {
  SyntheticOptions o;
  o.workers = 24;
  o.tenants = 3;
  o.depth = 150;  // more than two jumps of the positional index (64)
  o.prompt_blocks = 20;
  o.sequences_per_worker = 5;
  o.bodies = 30;
  o.per_engine_hashes = per_engine_hashes;
  return make_synthetic(o);
}

void check_baselines_agree(bool per_engine_hashes) {
  auto workload = small_workload(per_engine_hashes);
  auto events = workload.build;
  const auto churn = make_churn(workload, 200);
  events.insert(events.end(), churn.begin(), churn.end());

  testing::ReferenceIndex reference;
  ConcurrentRadixTree tree;
  DirectLookup lookup;
  MutexRadixTree mutex_radix;
  FlatHashIndex flat;
  PositionalIndex positional;
  PositionalIndex positional_short_jump(3);
  std::size_t rejected = 0;
  for (const auto& event : events) {
    reference.apply(event);
    tree.apply_event(lookup, event);
    rejected += mutex_radix.apply_event(event) ? 0 : 1;
    rejected += flat.apply_event(event) ? 0 : 1;
    rejected += positional.apply_event(event) ? 0 : 1;
    rejected += positional_short_jump.apply_event(event) ? 0 : 1;
  }
  CHECK(rejected == 0);

  const auto queries = make_queries(workload, 60, 170, 7);  // padded past the stored depth
  std::size_t scored = 0;
  for (const auto& query : queries) {
    const auto expected = reference.scores(query);
    scored += expected.size();
    CHECK(sorted(tree.find_matches(query, false)) == expected);
    CHECK(sorted(mutex_radix.find_matches(query)) == expected);
    CHECK(sorted(positional.find_matches(query)) == expected);
    CHECK(sorted(positional_short_jump.find_matches(query)) == expected);
    if (!per_engine_hashes) CHECK(sorted(flat.find_matches(query)) == expected);
  }
  CHECK(scored > queries.size());  // the queries do hit several streams

  // The positional index's dump rebuilds an index with the same scores.
  PositionalIndex restored;
  for (const auto& event : positional.dump_events()) CHECK(restored.apply_event(event));
  for (const auto& query : queries) CHECK(sorted(restored.find_matches(query)) == reference.scores(query));
}

}  // namespace

TEST_CASE("bench baselines score like the reference index, engines sharing hashes") { check_baselines_agree(false); }

TEST_CASE("bench baselines score like the reference index, every engine hashing its own way") {
  check_baselines_agree(true);
}
