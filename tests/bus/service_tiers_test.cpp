// Storage tiers through the service (issue 17 §2), against a real nats-server: `scores` stay the
// device tier's, lower tiers come as tier_scores and combined_scores in the same reply; stats and
// /metrics count blocks per tier; a snapshot keeps the tiers across a restart.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/service.h"
#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_client.h"
#include "tests/support/nats_server.h"
#include "tests/support/service_configs.h"

using namespace kvidx;
using namespace kvidx::bus;
using kvidx::testing::NatsServer;
using Json = nlohmann::json;

using kvidx::testing::connect_to;
using kvidx::testing::service_config_for;

namespace {

RouterEvent on_tier(RouterEvent event, std::optional<StorageTier> tier, std::uint64_t event_id) {
  event.storage_tier = tier;
  event.event.event_id = event_id;
  return event;
}

// Worker 7 offloads blocks 1..4 to host_pinned and evicts them from device; worker 8 holds 1..2 on
// device and 1..3 on disk; worker 9 holds 1 on external only.
std::vector<RouterEvent> offload_events() {
  using testing::make_remove_event_with_parent;
  using testing::make_store_event;
  const testing::Hashes blocks{1, 2, 3, 4};
  return {
      on_tier(make_store_event(7, blocks), std::nullopt, 0),
      on_tier(make_store_event(7, blocks), StorageTier::host_pinned, 1),
      on_tier(make_remove_event_with_parent(7, {}, blocks), StorageTier::device, 2),
      on_tier(make_store_event(8, {1, 2}), std::nullopt, 0),
      on_tier(make_store_event(8, {1, 2, 3}), StorageTier::disk, 1),
      on_tier(make_store_event(9, {1}), StorageTier::external, 0),
  };
}

std::uint64_t publish(const NatsServer& server, const std::vector<RouterEvent>& events) {
  Connection conn = connect_to(server);
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  Subjects subjects;
  for (const auto& event : events)
    REQUIRE(js.value().publish_async(subjects.events(event.worker_id), encode_router_event(event)).ok());
  REQUIRE(js.value().publish_async_complete(30000).ok());
  auto state = js.value().stream_state("KV_EVENTS");
  REQUIRE(state.ok());
  return state.value().last_sequence;
}

ScoreReply ask(const NatsServer& server, const std::vector<std::uint64_t>& hashes) {
  Connection client = connect_to(server);
  Subjects subjects;
  auto reply =
      client.request(subjects.query_scores(), encode_score_request({testing::local_hashes(hashes), false}), 5000);
  REQUIRE_MESSAGE(reply.ok(), reply.error().message);
  auto decoded = decode_score_reply(reply.value().data());
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  return decoded.value();
}

const std::vector<WorkerScore>& tier(const ScoreReply& reply, StorageTier tier) {
  for (const auto& t : reply.tier_scores) {
    if (t.tier == tier) return t.scores;
  }
  static const std::vector<WorkerScore> none;
  return none;
}

void check_offload_reply(const ScoreReply& reply) {
  // Device: only worker 8 (worker 7 evicted its blocks from GPU).
  CHECK(reply.scores == std::vector<WorkerScore>{{{8, 0}, 2}});
  CHECK(tier(reply, StorageTier::host_pinned) == std::vector<WorkerScore>{{{7, 0}, 4}});
  CHECK(tier(reply, StorageTier::disk) == std::vector<WorkerScore>{{{8, 0}, 3}});
  CHECK(tier(reply, StorageTier::external) == std::vector<WorkerScore>{{{9, 0}, 1}});
  REQUIRE(reply.combined_scores.has_value());
  REQUIRE(reply.combined_scores->size() == 3);
  CHECK((*reply.combined_scores)[0].worker == WorkerWithDpRank{7, 0});
  CHECK((*reply.combined_scores)[0].score == doctest::Approx(0.75 * 4));
  CHECK((*reply.combined_scores)[1].score == doctest::Approx(2 * 1.0 + 1 * 0.25));
  CHECK((*reply.combined_scores)[2].score == doctest::Approx(0.1));
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE(
    "service: offloaded blocks score per tier, stats and metrics count tiers, a restart from a snapshot keeps them") {
  NatsServer server;
  {
    KvidxService first(service_config_for(server, "tiers"));
    REQUIRE(first.start().ok());
    REQUIRE(first.wait_for_acked_sequence(publish(server, offload_events()), std::chrono::seconds(30)));
    check_offload_reply(ask(server, {1, 2, 3, 4}));

    Connection client = connect_to(server);
    Subjects subjects;
    auto stats = client.request(subjects.admin_stats(), "{}", 5000);
    REQUIRE(stats.ok());
    const Json s = Json::parse(stats.value().data());
    CHECK(s.at("blocks") == 2);   // the device tree's, as before tiers
    CHECK(s.at("workers") == 3);  // a worker holding blocks in any tier
    // Device events: worker 7's Stored and Removed, worker 8's Stored.
    CHECK(s.at("tiers").at("device") ==
          Json{{"streams", 1}, {"blocks", 2}, {"nodes", s.at("nodes")}, {"events_applied", 3}});
    CHECK(s.at("tiers").at("host_pinned").at("blocks") == 4);
    CHECK(s.at("tiers").at("disk").at("blocks") == 3);
    CHECK(s.at("tiers").at("external").at("streams") == 1);
    CHECK(s.at("tiers").at("external").at("events_applied") == 1);
    CHECK(s.at("tier_weights").at("host_pinned") == 0.75);
    const std::string metrics = first.render_metrics();
    CHECK(metrics.find("kvidx_tier_blocks{tier=\"device\"} 2") != std::string::npos);
    CHECK(metrics.find("kvidx_tier_blocks{tier=\"host_pinned\"} 4") != std::string::npos);
    CHECK(metrics.find("kvidx_tier_blocks{tier=\"disk\"} 3") != std::string::npos);
    CHECK(metrics.find("kvidx_tier_streams{tier=\"external\"} 1") != std::string::npos);
    CHECK(metrics.find("kvidx_tier_events_total{tier=\"device\"} 3") != std::string::npos);
    first.stop(/*final_snapshot=*/true);
    CHECK(first.stats().snapshots_written == 1);
  }
  // The snapshot is written as events with their tiers: the restore rebuilds every tier's tree.
  KvidxService second(service_config_for(server, "tiers"));
  REQUIRE(second.start().ok());
  CHECK(second.stats().messages == 0);  // nothing replayed from the stream
  check_offload_reply(ask(server, {1, 2, 3, 4}));
  // A Cleared (of any tier) clears worker 8 everywhere.
  REQUIRE(second
              .ingest_local_events(
                  std::vector<RouterEvent>{on_tier(testing::make_clear_event_with_dp_rank(8, 0), StorageTier::disk, 2)})
              .ok());
  REQUIRE(second.indexer().flush() == IndexerStatus::ok);
  const ScoreReply cleared = ask(server, {1, 2, 3, 4});
  CHECK(cleared.scores.empty());
  CHECK(tier(cleared, StorageTier::disk).empty());
  CHECK(tier(cleared, StorageTier::host_pinned) == std::vector<WorkerScore>{{{7, 0}, 4}});
}

TEST_CASE("service: tier weights set the combined score, and a device-only reply has no tier fields") {
  NatsServer server;
  ServiceConfig config = service_config_for(server, "weights");
  std::string error;
  const auto weights = parse_tier_weights("host_pinned=0.8", error);
  REQUIRE(weights.has_value());
  config.tier_weights = *weights;
  KvidxService service(config);
  REQUIRE(service.start().ok());
  REQUIRE(service.wait_for_acked_sequence(publish(server, offload_events()), std::chrono::seconds(30)));
  const ScoreReply reply = ask(server, {1, 2, 3, 4});
  REQUIRE(reply.combined_scores.has_value());
  CHECK((*reply.combined_scores)[0].score == doctest::Approx(0.8 * 4));
  // Blocks only device holds: the reply is the device-only reply Dynamo's router always read.
  REQUIRE(service.wait_for_acked_sequence(
      publish(server, {on_tier(testing::make_store_event(8, {50, 51}), std::nullopt, 2)}), std::chrono::seconds(30)));
  Connection client = connect_to(server);
  Subjects subjects;
  auto raw =
      client.request(subjects.query_scores(), encode_score_request({testing::local_hashes({50, 51}), false}), 5000);
  REQUIRE(raw.ok());
  CHECK(
      std::string(raw.value().data()) ==
      R"({"frequencies":[1,1],"scores":[{"dp_rank":0,"score":2,"worker_id":8}],"tree_sizes":[{"blocks":4,"dp_rank":0,"worker_id":8}]})");
}

}  // TEST_SUITE("integration")
