// Approximate mode over the bus: routing decisions on kv.routing.decisions become scores as if
// the worker had reported the blocks, and expire after the TTL.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

#include "libbus/nats_connection.h"
#include "libbus/service.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_server.h"

using namespace kvidx;
using namespace kvidx::bus;
using kvidx::testing::NatsServer;

namespace {

ServiceConfig approximate_config(const NatsServer& server, std::chrono::milliseconds ttl) {
  ServiceConfig c;
  c.nats_url = server.url();
  c.mode = IngestMode::core;
  c.lanes = 2;
  c.durable = "approx";
  c.snapshot_interval = std::chrono::milliseconds(0);
  PruneConfig prune;
  prune.ttl = ttl;
  c.approximate = prune;
  return c;
}

std::string ask(Connection& conn, const std::string& subject, const std::string& body) {
  auto reply = conn.request(subject, body, 5000);
  REQUIRE_MESSAGE(reply.ok(), reply.error().message);
  return std::string(reply.value().data());
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("service: routing decisions become scores in approximate mode and expire after the TTL") {
  NatsServer server;
  KvidxService service(approximate_config(server, std::chrono::milliseconds(1500)));
  REQUIRE(service.start().ok());
  ConnectionOptions options;
  options.url = server.url();
  auto conn = Connection::connect(options);
  REQUIRE(conn.ok());

  CHECK(ask(conn.value(), "kv.routing.decisions", R"({"worker_id": 7, "local_hashes": [1, 2, 3]})") ==
        R"({"ok":true})");
  CHECK(ask(conn.value(), "kv.routing.decisions", R"({"worker_id": 8, "dp_rank": 1, "local_hashes": [1, 9]})") ==
        R"({"ok":true})");
  const auto bad = nlohmann::json::parse(
      ask(conn.value(), "kv.routing.decisions", R"({"worker_id": 7, "local_hashes": [1], "sequence_hashes": [1, 2]})"));
  CHECK(bad["error"]["message"] == "local_hashes and sequence_hashes differ in length");

  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  const auto scores = nlohmann::json::parse(ask(conn.value(), "kv.query.scores", R"({"local_hashes": [1, 2, 3]})"));
  CHECK(scores["scores"] ==
        nlohmann::json::parse(
            R"([{"worker_id": 7, "dp_rank": 0, "score": 3}, {"worker_id": 8, "dp_rank": 1, "score": 1}])"));
  // The synthetic chains are the ones the workers would have reported: 3 + 2 blocks held.
  auto dump = service.indexer().dump_events();
  REQUIRE(dump.has_value());
  std::size_t held = 0;
  for (const auto& event : *dump) held += std::get<KvCacheStoreData>(event.event.data).blocks.size();
  CHECK(held == 5);
  CHECK(service.indexer().shard_sizes().block_count == 5);

  // After the TTL the pruner removes the blocks through the lanes.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline && service.indexer().shard_sizes().block_count > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    service.indexer().flush();
  }
  CHECK(service.indexer().shard_sizes().block_count == 0);
  const auto later = nlohmann::json::parse(ask(conn.value(), "kv.query.scores", R"({"local_hashes": [1, 2, 3]})"));
  CHECK(later["scores"].empty());
  service.stop(false);
}

TEST_CASE("service: without approximate mode routing decisions are not subscribed") {
  NatsServer server;
  ServiceConfig c = approximate_config(server, std::chrono::milliseconds(1000));
  c.approximate.reset();
  KvidxService service(c);
  REQUIRE(service.start().ok());
  ConnectionOptions options;
  options.url = server.url();
  auto conn = Connection::connect(options);
  REQUIRE(conn.ok());
  auto reply = conn.value().request("kv.routing.decisions", R"({"worker_id": 7, "local_hashes": [1]})", 500);
  CHECK_FALSE(reply.ok());  // no responder
  service.stop(false);
}

}  // TEST_SUITE("integration")
