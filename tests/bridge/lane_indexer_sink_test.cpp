// LaneIndexerSink goes through the service's intake: the same events give a bare LaneIndexer
// behind a bridge the index a `kvidx serve` builds (duplicates skipped, restarts cleared).
#include <doctest/doctest.h>

#include <vector>

#include "bridge/router_event_sink.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

RouterEvent with_id(RouterEvent e, std::uint64_t id) {
  e.event.event_id = id;
  return e;
}

std::uint32_t score(const LaneIndexer& indexer, const Hashes& query, WorkerWithDpRank stream) {
  const auto scores = indexer.find_matches(local_hashes(query));
  const auto it = scores.scores.find(stream);
  return it == scores.scores.end() ? 0 : it->second;
}

}  // namespace

TEST_CASE("a bridge's LaneIndexerSink skips redelivered events and clears a restarted stream as the service does") {
  LaneIndexer indexer(2);
  bridge::LaneIndexerSink sink(indexer);
  // Ids 1 and 2 (a redelivered id 0 would read as a restart, live as here).
  const std::vector<RouterEvent> first{with_id(make_store_event(5, {1, 2}), 1),
                                       remove_event(5, 2, 0, remove_hashes_with_parent({1}, {2}))};
  REQUIRE(sink.deliver(first));
  REQUIRE(sink.deliver(first));  // the same batch again: both events are duplicates
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(score(indexer, {1, 2}, {5, 0}) == 1);
  CHECK(sink.intake_totals().duplicates() == 2);
  CHECK(indexer.metrics().applied_with(ApplyStatus::block_not_found) == 0);  // the removal ran once

  // The engine restarted: ids from 0 again; its old blocks are cleared before the new store.
  const std::vector<RouterEvent> restarted{with_id(make_store_event(5, {7}), 0)};
  REQUIRE(sink.deliver(restarted));
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(score(indexer, {1, 2}, {5, 0}) == 0);
  CHECK(score(indexer, {7}, {5, 0}) == 1);
  CHECK(sink.intake_totals().resets == 1);
}
