// Done-when of the bridge: a vLLM-format stream over ZMQ -> ZmqEventBridge -> NATS JetStream ->
// KvidxService scores exactly as the same events fed directly as RouterEvents to a LaneIndexer.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "bridge/nats_event_sink.h"
#include "bridge/zmq_event_bridge.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/service.h"
#include "libindexer/hashing.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/bridge/expected_router_event.h"
#include "tests/bridge/fake_vllm_engine.h"
#include "tests/support/nats_server.h"

using namespace kvidx;
using namespace kvidx::bridge;
using namespace kvidx::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kBlockSize = 4;

EngineStored engine_stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                           std::vector<std::uint32_t> toks, std::optional<std::string> lora = std::nullopt) {
  EngineStored s;
  s.hashes = std::move(hashes);
  s.parent = parent;
  s.tokens = std::move(toks);
  s.block_size = kBlockSize;
  s.lora_name = std::move(lora);
  if (s.lora_name) s.lora_id = 1;
  return s;
}

struct EngineScript {
  WorkerId worker;
  DpRank rank;
  BatchEncoding encoding;
  bool replay;
  std::vector<std::vector<EngineEvent>> batches;
  std::vector<bool> delivered;  // false: the bridge misses it live (replay fills it)
};

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("a_vllm_stream_bridged_over_nats_scores_like_the_same_events_fed_directly") {
  NatsServer server;
  bus::ServiceConfig service_config;
  service_config.nats_url = server.url();
  service_config.lanes = 2;
  service_config.durable = "bridge-e2e";
  service_config.snapshot_interval = 0ms;
  bus::KvidxService service(service_config);
  REQUIRE(service.start().ok());

  constexpr std::uint64_t kHigh = 0xF000'0000'0000'0000ULL;  // hashes >= 2^63 on the wire
  std::vector<EngineScript> scripts;
  // Worker 1: array-encoded events, int hashes wrapped to i64 as vLLM does, a missed batch
  // recovered by replay, a LoRA store with a partial trailing block.
  scripts.push_back({1,
                     0,
                     BatchEncoding{HashEncoding::signed_wrap, EventEncoding::array, true},
                     true,
                     {{engine_stored({kHigh + 1, kHigh + 2}, std::nullopt, tokens(1, 8))},
                      {engine_stored({kHigh + 3}, kHigh + 2, tokens(9, 4))},
                      {engine_stored({kHigh + 11, kHigh + 12}, std::nullopt, tokens(1, 10), "sql-adapter")},
                      {EngineRemoved{{kHigh + 3}}, engine_stored({kHigh + 4, kHigh + 5}, kHigh + 2, tokens(21, 8))}},
                     {true, false, true, true}});
  // Worker 2, rank 1: map-encoded events, sha256-sized byte hashes, a clear, no replay socket.
  scripts.push_back({2,
                     1,
                     BatchEncoding{HashEncoding::bytes32, EventEncoding::map, true},
                     false,
                     {{engine_stored({21, 22, 23}, std::nullopt, tokens(1, 12))},
                      {EngineCleared{}},
                      {engine_stored({24, 25}, std::nullopt, tokens(1, 8)), engine_stored({26}, 25, tokens(21, 4))},
                      {EngineRemoved{{26}}}},
                     {true, true, true, true}});

  LaneIndexer direct(2);
  std::uint64_t published = 0;
  for (const EngineScript& script : scripts) {
    CAPTURE(script.worker);
    FakeVllmEngine engine(script.replay);
    NatsSinkOptions sink_options;
    sink_options.url = server.url();
    auto sink = NatsEventSink::connect(sink_options);
    REQUIRE_MESSAGE(sink.ok(), sink.error().message);
    ZmqBridgeConfig config;
    config.endpoint = engine.endpoint();
    if (script.replay) config.replay_endpoint = engine.replay_endpoint();
    config.conversion.worker_id = script.worker;
    config.conversion.block_size = kBlockSize;
    ZmqEventBridge bridge(config, *sink.value());
    REQUIRE(bridge.start().ok());
    engine.wait_for_subscriber();

    for (std::size_t seq = 0; seq < script.batches.size(); ++seq) {
      engine.publish(seq, pack_batch(script.batches[seq], script.rank, script.encoding), script.delivered[seq]);
      // A LaneIndexer applies in queue order and ignores event ids.
      for (const EngineEvent& e : script.batches[seq])
        direct.enqueue_event(direct_event(script.worker, script.rank, 0, e));
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (bridge.stats().batches_delivered < script.batches.size() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    const auto stats = bridge.stats();
    REQUIRE(stats.batches_delivered == script.batches.size());
    CHECK(stats.sink_failures == 0);
    CHECK(stats.unrecovered_batches == 0);
    CHECK(stats.replayed_batches == (script.replay ? 1 : 0));
    bridge.stop();
    published += sink.value()->published();
  }
  CHECK(published == 10);  // one RouterEvent per engine event (5 per engine)

  bus::ConnectionOptions options;
  options.url = server.url();
  auto conn = bus::Connection::connect(options);
  REQUIRE(conn.ok());
  auto js = bus::JetStream::create(conn.value());
  REQUIRE(js.ok());
  auto state = js.value().stream_state("KV_EVENTS");
  REQUIRE(state.ok());
  CHECK(state.value().last_sequence == published);
  REQUIRE(service.wait_for_acked_sequence(state.value().last_sequence, 20s));
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  REQUIRE(direct.flush() == IndexerStatus::ok);
  const auto service_stats = service.stats();
  CHECK(service_stats.events_applied == published);
  CHECK(service_stats.gaps == 0);
  MESSAGE("apply pnf=" << service.indexer().metrics().applied_with(ApplyStatus::parent_not_found)
                       << " bnf=" << service.indexer().metrics().applied_with(ApplyStatus::block_not_found)
                       << " dups=" << service_stats.duplicates << " applied=" << service_stats.events_applied);
  CHECK(service_stats.dead_letters == 0);

  const std::uint64_t lora_seed = block_hash_seed("sql-adapter");
  const std::vector<std::vector<LocalBlockHash>> queries = {
      compute_block_hashes(tokens(1, 12), kBlockSize),
      compute_block_hashes(concat(tokens(1, 8), tokens(21, 8)), kBlockSize),
      compute_block_hashes(concat(tokens(1, 8), tokens(21, 4)), kBlockSize),
      compute_block_hashes(tokens(1, 12), kBlockSize, lora_seed),
      compute_block_hashes(tokens(1, 4), kBlockSize),
      compute_block_hashes(tokens(100, 8), kBlockSize),
  };
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < queries.size(); ++i) {
    CAPTURE(i);
    const auto via_bridge = service.indexer().find_matches(queries[i]);
    const auto fed_directly = direct.find_matches(queries[i]);
    CHECK(via_bridge.scores == fed_directly.scores);
    CHECK(via_bridge.frequencies == fed_directly.frequencies);
    nonzero += via_bridge.scores.empty() ? 0 : 1;
  }
  CHECK(nonzero == 5);
  // Spot checks that the comparison is about real state: worker 1 holds 1..8 -> 21..28 (the
  // replayed 9..12 block was removed again), the LoRA chain scores only salted queries, worker 2's
  // rank 1 holds 1..8 after its clear and lost 21..24 to the removal.
  const auto path = service.indexer().find_matches(queries[1]).scores;
  CHECK(path.at({1, 0}) == 4);
  CHECK(path.at({2, 1}) == 2);
  const auto lora = service.indexer().find_matches(queries[3]).scores;
  CHECK(lora.size() == 1);
  CHECK(lora.at({1, 0}) == 2);
}

}  // TEST_SUITE("integration")
