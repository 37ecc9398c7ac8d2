// EventIntake / IntakeFeed: the one place the event-ordering rules live (the service, offline
// replay and the bridge's LaneIndexerSink all use it). What it hands on, in what order, and what
// it counts.
#include <doctest/doctest.h>

#include <vector>

#include "libindexer/intake/event_intake.h"
#include "libindexer/intake/intake_feed.h"
#include "tests/support/event_builders.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

RouterEvent with_id(RouterEvent e, std::uint64_t id, DpRank rank = 0) {
  e.event.event_id = id;
  e.event.dp_rank = rank;
  return e;
}

std::vector<EventKind> kinds_of(const std::vector<RouterEvent>& events) {
  std::vector<EventKind> out;
  for (const auto& e : events) out.push_back(kind_of(e.event.data));
  return out;
}

// The 4-line log: store 1,2; remove 2; that removal redelivered; the publisher restarts
// (event_id 0) and stores 2 under 1.
std::vector<RouterEvent> redelivery_then_restart_log() {
  const auto removal = remove_event(1, 1, 0, remove_hashes_with_parent({1}, {2}));
  return {with_id(make_store_event(1, {1, 2}), 0), removal, removal,
          with_id(make_store_event_with_parent(1, {1}, {2}), 0)};
}

}  // namespace

TEST_CASE("intake skips a redelivery and clears a restarted stream right before its first event") {
  EventIntake intake;
  auto events = redelivery_then_restart_log();
  std::vector<RouterEvent> out;
  const IntakeTally t = intake.admit(events, out);
  CHECK(kinds_of(out) ==
        std::vector<EventKind>{EventKind::stored, EventKind::removed, EventKind::cleared, EventKind::stored});
  CHECK(out[2].stream() == WorkerWithDpRank{1, 0});
  CHECK(t.duplicates_by_kind[static_cast<std::size_t>(EventKind::removed)] == 1);
  CHECK(t.duplicates() == 1);
  CHECK(t.resets == 1);
  CHECK(t.clears_inserted == 1);
  CHECK(t.accepted() == 3);  // the inserted clear is not an accepted event
  CHECK(t.gaps == 0);
  CHECK(intake.totals().resets == 1);
  CHECK(intake.sequencer().watermark({1, 0}) == 0u);
}

TEST_CASE("intake counts gaps and clears only with clear_on_gap, across calls") {
  for (bool clear_on_gap : {false, true}) {
    CAPTURE(clear_on_gap);
    EventIntake intake(IntakeOptions{StreamSequencerOptions{0, clear_on_gap, 0}, false});
    std::vector<RouterEvent> out;
    std::vector<RouterEvent> first{with_id(make_store_event(2, {1}), 0, 1)};
    intake.admit(first, out);
    std::vector<RouterEvent> second{with_id(make_store_event_with_parent(2, {1}, {2}), 4, 1),
                                    with_id(make_store_event(3, {7}), 9)};
    const IntakeTally t = intake.admit(second, out);
    CHECK(t.gaps == 1);
    CHECK(t.missing_events == 3);
    CHECK(t.clears_inserted == (clear_on_gap ? 1u : 0u));
    if (clear_on_gap) {
      CHECK(kinds_of(out) ==
            std::vector<EventKind>{EventKind::stored, EventKind::cleared, EventKind::stored, EventKind::stored});
      CHECK(out[1].stream() == WorkerWithDpRank{2, 1});
    } else {
      CHECK(kinds_of(out) == std::vector<EventKind>{EventKind::stored, EventKind::stored, EventKind::stored});
    }
    CHECK(intake.totals().gaps == 1);
    CHECK(intake.totals().accepted() == 3);
  }
}

TEST_CASE("an intake feed builds the index the service builds from a redelivery and a restart") {
  LaneIndexer indexer(2);
  IntakeFeed feed(indexer);
  auto events = redelivery_then_restart_log();
  REQUIRE(feed.deliver(events) == IndexerStatus::ok);
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  // Restart cleared worker 1, so the Stored under block 1 found no parent: nothing held.
  const auto scores = indexer.find_matches(local_hashes({1, 2}));
  CHECK(score_of(scores, {1, 0}) == std::nullopt);
  CHECK(indexer.metrics().applied_with(ApplyStatus::parent_not_found) == 1);
  CHECK(feed.totals().duplicates() == 1);
  CHECK(feed.totals().resets == 1);
}
