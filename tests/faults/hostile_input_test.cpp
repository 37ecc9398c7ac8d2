// Hostile input: each kind of bad message with the exact error it gets and the counter that
// records it. Decoder level (no NATS) for the sizes NATS cannot carry (8 MiB+, 10^6 blocks), then
// through a running service (dead letters with their reason header, stats and /metrics counters),
// and through `kvidx serve` flags that change the limits.
#include <doctest/doctest.h>

#include <signal.h>

#include <mutex>
#include <string>

#include "libbus/service.h"
#include "tests/faults/fault_support.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsServer;
using kvidx::testing::TempDir;

namespace {

std::string store_json(WorkerId worker, std::size_t blocks, std::uint64_t first = 1) {
  std::string out = R"({"worker_id":)" + std::to_string(worker) +
                    R"(,"event":{"event_id":0,"data":{"stored":{"parent_hash":null,"blocks":[)";
  out.reserve(out.size() + blocks * 40);
  for (std::size_t i = 0; i < blocks; ++i) {
    if (i) out += ',';
    out += R"({"block_hash":)" + std::to_string(first + i) + R"(,"tokens_hash":)" + std::to_string(first + i) + "}";
  }
  out += "]}}}}";
  return out;
}

std::string nested(std::size_t depth) {
  // An unknown (ignored) block field whose value is nested `depth` arrays deep.
  return R"({"worker_id":1,"event":{"event_id":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":1,"extra":)" +
         std::string(depth, '[') + std::string(depth, ']') + "}]}}}}";
}

std::string error_of(std::string_view json, const DecodeLimits& limits = {}) {
  auto decoded = decode_router_events(json, limits);
  REQUIRE_FALSE(decoded.ok());
  const std::string message = decoded.error().message();
  CHECK_FALSE(message.empty());
  return message;
}

}  // namespace

TEST_SUITE("hostile") {

TEST_CASE("hostile: oversize messages are rejected before parsing, naming the limit") {
  std::string big = store_json(1, 4);
  big.append((8u << 20) + 1 - big.size(), ' ');  // valid JSON, one byte over 8 MiB
  CHECK(error_of(big) == "message of 8388609 bytes exceeds the limit of 8388608 bytes");
  DecodeLimits small;
  small.max_message_bytes = 100;
  CHECK(error_of(store_json(1, 4), small) == "message of 220 bytes exceeds the limit of 100 bytes");
  CHECK(decode_router_events(store_json(1, 4)).ok());
}

TEST_CASE("hostile: deeply nested JSON is rejected without recursion, even a million levels deep") {
  CHECK(decode_router_events(nested(24)).ok());  // 6 levels of envelope + 24 = 30
  CHECK(error_of(nested(40)) == "JSON nesting deeper than 32 levels");
  CHECK(error_of(nested(1'000'000)) == "JSON nesting deeper than 32 levels");
}

TEST_CASE("hostile: a 10^6-block store event is bounded by the message size, then by the block limit") {
  const std::string huge = store_json(1, 1'000'000);
  CHECK(huge.size() > (8u << 20));
  CHECK(error_of(huge).find("exceeds the limit of 8388608 bytes") != std::string::npos);
  DecodeLimits roomy;
  roomy.max_message_bytes = 128u << 20;
  roomy.max_blocks_per_event = 999'999;
  CHECK(error_of(huge, roomy) == "event.data.stored.blocks: 1000000 blocks exceed the limit of 999999 per event");
  roomy.max_blocks_per_event = 1u << 20;
  auto decoded = decode_router_events(huge, roomy);
  REQUIRE(decoded.ok());
  REQUIRE(decoded.value().size() == 1);
  // The tree takes it as one long chain and gives it all back.
  LaneIndexer indexer(1);
  REQUIRE(indexer.enqueue_event(decoded.value()[0]) == IndexerStatus::ok);
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(indexer.shard_sizes().block_count == 1'000'000);
  RouterEvent clear = testing::make_clear_event_with_dp_rank(1, 0);
  clear.event.event_id = 1;
  REQUIRE(indexer.enqueue_event(clear) == IndexerStatus::ok);
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(indexer.shard_sizes().block_count == 0);
  CHECK(indexer.shard_sizes().node_count <= 1);
}

TEST_CASE("hostile: u64 overflow and negative numbers are rejected with the field's path") {
  CHECK(error_of(R"({"worker_id":18446744073709551616,"event":{"event_id":0,"data":"cleared"}})")
            .rfind("worker_id: expected an unsigned 64-bit integer", 0) == 0);
  CHECK(decode_router_events(R"({"worker_id":18446744073709551615,"event":{"event_id":18446744073709551615,"data":"cleared"}})").ok());
  CHECK(error_of(R"({"worker_id":-1,"event":{"event_id":0,"data":"cleared"}})") ==
        "worker_id: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":-5,"data":"cleared"}})") ==
        "event.event_id: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":0,"data":"cleared","dp_rank":4294967296}})") ==
        "event.dp_rank: value 4294967296 does not fit an unsigned 32-bit integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":0,"data":{"removed":{"block_hashes":[1,-2]}}}})") ==
        "event.data.removed.block_hashes[1]: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":0,"data":{"removed":{"block_hashes":[1e30]}}}})")
            .rfind("event.data.removed.block_hashes[0]: expected an unsigned 64-bit integer", 0) == 0);
}

TEST_CASE("hostile: through the service, each bad message is dead-lettered with its reason and counted; valid but "
          "inapplicable events are counted by the tree and never corrupt it") {
  NatsServer server;
  bus::ServiceConfig config;
  config.nats_url = server.url();
  config.durable = "hostile";
  config.lanes = 2;
  config.snapshot_interval = std::chrono::milliseconds(0);
  config.limits.max_message_bytes = 64 * 1024;
  config.limits.max_blocks_per_event = 1000;
  config.query_limits.max_hashes = 16;
  bus::KvidxService service(config);
  REQUIRE(service.start().ok());
  bus::Connection conn = connect_to(server);
  std::mutex mutex;
  std::vector<std::string> reasons;
  auto sub = conn.subscribe("kv.deadletter", [&](bus::Message m) {
    std::lock_guard lock(mutex);
    reasons.push_back(std::string(m.header(bus::kDeadLetterReasonHeader).value_or("")));
  });
  REQUIRE(sub.ok());
  REQUIRE(conn.flush().ok());
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  auto publish = [&](const std::string& subject, const std::string& body) {
    auto ack = js.value().publish(subject, body);
    REQUIRE_MESSAGE(ack.ok(), ack.error().message);
    return ack.value().sequence;
  };

  std::string oversize = store_json(1, 4);
  oversize.append(100 * 1024, ' ');
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {oversize, "decode: message of 102620 bytes exceeds the limit of 65536 bytes"},
      {nested(64), "decode: JSON nesting deeper than 32 levels"},
      {store_json(1, 1001), "decode: event.data.stored.blocks: 1001 blocks exceed the limit of 1000 per event"},
      {R"({"worker_id":1,"event":{"event_id":18446744073709551616,"data":"cleared"}})",
       "decode: event.event_id: expected an unsigned 64-bit integer"},
      {R"({"worker_id":1,"event":{"event_id":-1,"data":"cleared"}})",
       "decode: event.event_id: expected an unsigned 64-bit integer, got negative integer"},
  };
  for (const auto& [body, reason] : hostile) publish("kv.events.1", body);

  // Valid JSON the tree cannot apply: counted by the tree, nothing changes.
  RouterEvent base = testing::make_store_event(1, {1, 2, 3});
  publish("kv.events.1", encode_router_event(base));
  RouterEvent orphan = testing::make_store_event_with_parent(1, {7, 7, 7}, {8});  // parent never stored
  orphan.event.event_id = 1;
  publish("kv.events.1", encode_router_event(orphan));
  RouterEvent unknown_remove = testing::remove_event(1, 2, 0, {ExternalSequenceBlockHash{424242}});
  publish("kv.events.1", encode_router_event(unknown_remove));
  RouterEvent unknown_clear = testing::make_clear_event_with_dp_rank(99, 3);
  const std::uint64_t last = publish("kv.events.99", encode_router_event(unknown_clear));

  REQUIRE(service.wait_for_acked_sequence(last, std::chrono::seconds(20)));
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    {
      std::lock_guard lock(mutex);
      if (reasons.size() >= hostile.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard lock(mutex);
    REQUIRE(reasons.size() == hostile.size());
    for (std::size_t i = 0; i < hostile.size(); ++i) {
      CHECK_MESSAGE(reasons[i].rfind(hostile[i].second, 0) == 0, reasons[i] << " vs " << hostile[i].second);
    }
  }
  const bus::ServiceStats stats = service.stats();
  CHECK(stats.dead_letters == hostile.size());
  CHECK(stats.events_applied == 4);
  const auto tree = service.indexer().metrics();
  CHECK(tree.applied[0][static_cast<std::size_t>(ApplyStatus::parent_not_found)] == 1);
  CHECK(tree.applied[1][static_cast<std::size_t>(ApplyStatus::block_not_found)] == 1);
  const auto dump = service.indexer().dump_events();
  REQUIRE(dump.has_value());
  LaneIndexer only_base(1);
  REQUIRE(only_base.enqueue_event(base) == IndexerStatus::ok);
  CHECK(normal_form(*dump) == normal_form(*only_base.dump_events()));
  CHECK(service.indexer().shard_sizes().block_count == 3);
  CHECK(service.indexer().shard_sizes().worker_count == 1);
  const std::string metrics = service.render_metrics();
  CHECK(metrics.find("kvidx_dead_letters_total 5") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_tree_apply_total{type="stored",status="parent_not_found"} 1)") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_tree_apply_total{type="removed",status="block_not_found"} 1)") != std::string::npos);
  auto admin = admin_stats(conn);
  REQUIRE(admin.has_value());
  CHECK(admin->at("apply_parent_not_found") == 1);
  CHECK(admin->at("apply_block_not_found") == 1);

  // Score queries: over the hash limit, nested, negative -> bad_request with the reason.
  const bus::Subjects subjects;
  auto ask = [&](const std::string& body) {
    auto reply = conn.request(subjects.query_scores(), body, 2000);
    REQUIRE(reply.ok());
    return Json::parse(reply.value().data());
  };
  Json sixteen = Json::array();
  for (int i = 0; i < 16; ++i) sixteen.push_back(i + 1);
  CHECK(ask(Json{{"local_hashes", sixteen}}.dump()).contains("scores"));
  sixteen.push_back(17);
  const Json too_long = ask(Json{{"local_hashes", sixteen}}.dump());
  CHECK(too_long.at("error").at("code") == "bad_request");
  CHECK(too_long.at("error").at("message") == "local_hashes: 17 entries exceed the limit of 16");
  const Json deep = ask(R"({"local_hashes":[[[[[[[[[[1]]]]]]]]]]})");
  CHECK(deep.at("error").at("message") == "JSON nesting deeper than 8 levels");
  const Json negative = ask(R"({"local_hashes":[1,-1]})");
  CHECK(negative.at("error").at("message") == "local_hashes[1]: expected an unsigned 64-bit integer, got negative integer");
}

TEST_CASE("hostile: kvidx serve limit flags change what is accepted") {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  const bus::Subjects subjects;
  Json five = Json::array({1, 2, 3, 4, 5});
  for (const bool limited : {true, false}) {
    std::vector<std::string> flags = {"--snapshot-interval", "0", "--no-restore"};
    if (limited) flags.insert(flags.end(), {"--max-blocks-per-event", "8", "--max-query-hashes", "4", "--max-message-bytes", "4096"});
    ServeProcess serve(server, dir, limited ? "limited" : "defaults", flags);
    wait_ready(conn, serve);
    const std::uint64_t before = admin_stats(conn)->at("dead_letters").get<std::uint64_t>();
    ensure_events_stream(conn);
    std::string padded = store_json(5, 2);
    padded.append(5000, ' ');
    REQUIRE(js.value().publish("kv.events.5", padded).ok());
    REQUIRE(js.value().publish("kv.events.5", store_json(5, 9, 100)).ok());
    auto last = js.value().publish("kv.events.6", store_json(6, 8));
    REQUIRE(last.ok());
    const Json stats = wait_acked(conn, serve, last.value().sequence);
    auto reply = conn.request(subjects.query_scores(), Json{{"local_hashes", five}}.dump(), 2000);
    REQUIRE(reply.ok());
    const Json answer = Json::parse(reply.value().data());
    if (limited) {
      CHECK(stats.at("dead_letters").get<std::uint64_t>() - before == 2);
      REQUIRE(answer.contains("error"));
      CHECK(answer.at("error").at("message") == "local_hashes: 5 entries exceed the limit of 4");
    } else {
      CHECK(stats.at("dead_letters").get<std::uint64_t>() == before);
      CHECK(answer.contains("scores"));
    }
    CHECK(serve.stop(SIGTERM) == 0);
  }
}

TEST_CASE("hostile: kvidx serve rejects bad limit flags as usage errors") {
  using kvidx::testing::run_command;
  const std::string kvidx = testing::built_binary("kvidx");
  CHECK(run_command({kvidx, "serve", "--max-blocks-per-event", "0", "--check-config"}).exit_code == 2);
  CHECK(run_command({kvidx, "serve", "--max-message-bytes", "-5", "--check-config"}).exit_code == 2);
  const auto ok = run_command({kvidx, "serve", "--max-query-hashes", "64", "--check-config"});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("max query hashes 64") != std::string::npos);
}
}
