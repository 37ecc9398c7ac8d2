// Fault: a worker restarts and its event_id goes back to 0. Per the spec (wire-format.md,
// "Ordering, gaps and recovery"), kvidx treats it as a reset of that (worker, rank): it clears the
// stream, then applies the new events; counted in stats `resets`. Other streams (including other
// ranks of the same worker) are untouched, and an old id replayed far backwards stays a duplicate.
#include <doctest/doctest.h>

#include <signal.h>

#include "tests/faults/fault_support.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsServer;
using kvidx::testing::TempDir;

TEST_SUITE("faults") {
TEST_CASE("faults: publisher restart with event_id reset to 0 clears that stream, is counted and leaves a sound tree") {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  ServeProcess serve(server, dir, "reset", {"--lanes", "3", "--snapshot-interval", "0"});
  wait_ready(conn, serve);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  const bus::Subjects subjects;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  auto publish = [&](const RouterEvent& e) {
    return publish_retrying(js.value(), subjects.events(e.worker_id), encode_router_event(e), deadline);
  };

  const Histories before = branching_histories(4, 2, 30, 3);
  std::vector<const RouterEvent*> expected_events = interleave(before);
  for (const RouterEvent* e : expected_events) publish(*e);

  // Worker 2 rank 0 restarts: a fresh history (other blocks) from event_id 0.
  const std::vector<RouterEvent> restarted = branching_history(2, 0, 12, 77);
  // Worker 3 rank 1 restarts and its first event is a Cleared (id 0), then a fresh history.
  std::vector<RouterEvent> restarted_clear = branching_history(3, 1, 8, 78);
  restarted_clear.insert(restarted_clear.begin(), testing::make_clear_event_with_dp_rank(3, 1));
  for (std::size_t i = 0; i < restarted_clear.size(); ++i) restarted_clear[i].event.event_id = i;
  // Worker 1 rank 0 re-sends an old id with new content: a duplicate, never applied.
  RouterEvent stale = testing::make_store_event_with_parent(1, {1, 2, 3, 4}, {999, 998});
  stale.event.event_id = 5;
  stale.event.dp_rank = 0;

  RouterEvent clear_2_0 = testing::make_clear_event_with_dp_rank(2, 0);
  RouterEvent clear_3_1 = testing::make_clear_event_with_dp_rank(3, 1);
  expected_events.push_back(&clear_2_0);
  expected_events.push_back(&clear_3_1);
  for (std::size_t i = 0; i < std::max(restarted.size(), restarted_clear.size()); ++i) {
    if (i < restarted.size()) {
      publish(restarted[i]);
      expected_events.push_back(&restarted[i]);
    }
    if (i < restarted_clear.size()) {
      publish(restarted_clear[i]);
      expected_events.push_back(&restarted_clear[i]);
    }
  }
  const std::uint64_t last = publish(stale);

  const Json stats = wait_acked(conn, serve, last);
  CHECK(stats.at("resets") == 2);
  CHECK(stats.at("duplicates") == 1);
  CHECK(stats.at("gaps") == 0);
  CHECK(stats.at("dead_letters") == 0);
  const OfflineResult expected = offline_apply(expected_events);
  const auto form = normal_form(admin_dump(conn));
  CHECK(form == expected.form);
  // The tree holds exactly the live set: no stale blocks of the pre-restart streams, no extra nodes.
  CHECK(stats.at("blocks") == expected.sizes.block_count);
  CHECK(nodes_within_bound(stats));  // bounded, not compared (see fault_support.h)
  CHECK(stats.at("streams") == expected.sizes.worker_count);
  for (const BlockKey& key : form) CHECK_FALSE((std::get<0>(key) == 1 && std::get<4>(key) == 999));

  // Scores agree with the model: the restarted stream now matches only its new chain.
  auto reply = conn.request(subjects.query_scores(), Json{{"local_hashes", {1, 2, 3, 4}}}.dump(), 2000);
  REQUIRE(reply.ok());
  const Json scores = Json::parse(reply.value().data()).at("scores");
  CHECK(scores.size() == expected.sizes.worker_count);  // every stream holds the shared prefix
  CHECK(serve.stop(SIGTERM) == 0);
}
}  // TEST_SUITE("faults")
