// ZMQ sources embedded in the service (kvidx serve --zmq): events from an in-process source take
// KvidxService's own ingestion path, so a vLLM stream bridged in-process indexes, scores, dumps
// and counts exactly as the same events published to the service as RouterEvents over NATS.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "bridge/in_process_bridges.h"
#include "libbus/nats_connection.h"
#include "libbus/service.h"
#include "libcodec/event_codec.h"
#include "libindexer/hashing.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/bridge/expected_router_event.h"
#include "tests/bridge/fake_vllm_engine.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::bridge;
using namespace kvidx::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kBlockSize = 4;

bus::ServiceConfig service_config(const NatsServer& server, const std::string& name) {
  bus::ServiceConfig c;
  c.nats_url = server.url();
  c.lanes = 2;
  c.subject_prefix = name;
  c.stream = "KV_" + name;
  c.durable = name;
  c.snapshot_stream = "KV_SNAPSHOTS_" + name;
  c.snapshot_interval = 0ms;
  return c;
}

// A 64-hex-digit mm identifier whose first 16 digits spell `value` (what vLLM puts in extra_keys).
std::string mm_digest(std::uint64_t value) {
  char head[17];
  std::snprintf(head, sizeof(head), "%016llx", static_cast<unsigned long long>(value));
  return std::string(head) + std::string(48, '0');
}

EngineStored stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                    std::vector<std::uint32_t> toks) {
  EngineStored s;
  s.hashes = std::move(hashes);
  s.parent = parent;
  s.tokens = std::move(toks);
  s.block_size = kBlockSize;
  return s;
}

using Holding = std::tuple<WorkerId, DpRank, std::uint64_t, std::uint64_t>;

// (worker, rank, parent's tokens hash, tokens hash) of every block a dump holds. Tokens hashes,
// not external ones: a node shared by workers is dumped with the external hash of whichever
// stored it first, which depends on arrival order across workers, not on what each one holds.
std::set<Holding> holdings(const std::vector<RouterEvent>& dump) {
  std::map<std::uint64_t, std::uint64_t> tokens_of;  // external -> tokens hash, within this dump
  for (const RouterEvent& e : dump) {
    for (const StoredBlock& b : std::get<KvCacheStoreData>(e.event.data).blocks) {
      tokens_of[b.block_hash.value] = b.tokens_hash.value;
    }
  }
  std::set<Holding> out;
  for (const RouterEvent& e : dump) {
    const auto& data = std::get<KvCacheStoreData>(e.event.data);
    std::uint64_t parent = data.parent_hash ? tokens_of.at(data.parent_hash->value) : 0;
    for (const StoredBlock& b : data.blocks) {
      out.emplace(e.worker_id, e.event.dp_rank, parent, b.tokens_hash.value);
      parent = b.tokens_hash.value;
    }
  }
  return out;
}

struct EngineScript {
  WorkerId worker;
  DpRank rank;
  BatchEncoding encoding;
  bool replay;
  std::vector<std::vector<EngineEvent>> batches;
  std::vector<bool> delivered;  // false: missed live (replayed when the engine has a replay socket)
};

}  // namespace

TEST_SUITE("integration") {
TEST_CASE("in_process_events_take_the_service_ingest_path_duplicates_gaps_and_restarts") {
  NatsServer server;
  auto config = service_config(server, "local");
  config.mode = bus::IngestMode::core;
  bus::KvidxService service(config);
  auto early = make_store_event(4, {1, 2});
  CHECK_FALSE(service.ingest_local_events(std::span(&early, 1)).ok());  // not started
  REQUIRE(service.start().ok());

  auto batch_of = [](std::initializer_list<RouterEvent> events) { return std::vector<RouterEvent>(events); };
  auto with_id = [](RouterEvent e, std::uint64_t id) {
    e.event.event_id = id;
    return e;
  };
  const auto first =
      batch_of({with_id(make_store_event(4, {1, 2}), 0), with_id(make_store_event_with_parent(4, {1, 2}, {3}), 1)});
  CHECK(service.ingest_local_events(first).ok());
  CHECK(service.ingest_local_events(batch_of({with_id(make_store_event_with_parent(4, {1, 2}, {3}), 1)}))
            .ok());  // duplicate
  CHECK(service.ingest_local_events(batch_of({with_id(make_store_event_with_parent(4, {1, 2, 3}, {5}), 3)}))
            .ok());  // gap of 1
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  CHECK(service.indexer().find_matches(local_hashes({1, 2, 3, 5})).scores.at({4, 0}) == 4);
  CHECK(service.ingest_local_events(batch_of({with_id(make_store_event(4, {7}), 0)})).ok());  // restart: clear, apply
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);

  CHECK(service.indexer().find_matches(local_hashes({1})).scores.empty());
  CHECK(service.indexer().find_matches(local_hashes({7})).scores.at({4, 0}) == 1);
  const auto stats = service.stats();
  CHECK(stats.local_batches == 4);
  CHECK(stats.messages == 0);
  CHECK(stats.events_applied == 4);
  CHECK(stats.duplicates == 1);
  CHECK(stats.gaps == 1);
  CHECK(stats.missing_events == 1);
  CHECK(stats.resets == 1);
  const std::string metrics = service.render_metrics();
  CHECK(metrics.find("kvidx_local_event_batches_total 4") != std::string::npos);
  CHECK(metrics.find("kvidx_stream_resets_total 1") != std::string::npos);

  service.stop(false);
  CHECK_FALSE(service.ingest_local_events(first).ok());  // refused once stop() began
  CHECK(service.stats().local_batches == 4);
}

TEST_CASE("a_vllm_stream_bridged_in_process_scores_and_dumps_like_the_same_events_fed_as_router_events") {
  NatsServer server;
  bus::KvidxService bridged(service_config(server, "inproc"));
  bus::KvidxService fed(service_config(server, "fed"));
  REQUIRE(bridged.start().ok());
  REQUIRE(fed.start().ok());

  constexpr std::uint64_t kHigh = 0xF000'0000'0000'0000ULL;
  auto lora = stored({kHigh + 11, kHigh + 12}, std::nullopt, tokens(1, 10));
  lora.lora_name = "sql-adapter";
  lora.lora_id = 1;
  auto mm = stored({21, 22, 23}, std::nullopt, tokens(1, 12));
  mm.extra_keys =
      std::vector<std::optional<std::vector<std::string>>>{std::nullopt, std::vector<std::string>{mm_digest(0xAA)},
                                                           std::vector<std::string>{mm_digest(0xBB), "a-cache-salt"}};
  auto eagle = stored({31, 32}, std::nullopt, tokens(1, 9));  // 8 bigrams: two Eagle blocks
  eagle.bigrams = true;
  auto eagle_again = eagle;
  eagle_again.hashes = {33, 34};

  std::vector<EngineScript> scripts;
  // Worker 1: a missed batch filled by replay, i64-wrapped hashes, a LoRA chain.
  scripts.push_back({1,
                     0,
                     BatchEncoding{HashEncoding::signed_wrap, EventEncoding::array, true},
                     true,
                     {{stored({kHigh + 1, kHigh + 2}, std::nullopt, tokens(1, 8))},
                      {stored({kHigh + 3}, kHigh + 2, tokens(9, 4))},
                      {lora},
                      {EngineRemoved{{kHigh + 3}}, stored({kHigh + 4, kHigh + 5}, kHigh + 2, tokens(21, 8))}},
                     {true, false, true, true}});
  // Worker 2, rank 1: multimodal blocks (extra_keys), no replay socket, one batch lost for good.
  scripts.push_back(
      {2,
       1,
       BatchEncoding{HashEncoding::bytes32, EventEncoding::map, true},
       false,
       {{mm}, {stored({30}, std::nullopt, tokens(40, 4))}, {stored({24}, 23, tokens(13, 4))}, {EngineRemoved{{24}}}},
       {true, false, true, true}});
  // Worker 3: Eagle bigram token ids and a clear.
  scripts.push_back({3, 0, BatchEncoding{}, false, {{eagle}, {EngineCleared{}}, {eagle_again}}, {true, true, true}});

  std::vector<std::unique_ptr<FakeVllmEngine>> engines;
  std::vector<ZmqBridgeConfig> sources;
  for (const EngineScript& script : scripts) {
    engines.push_back(std::make_unique<FakeVllmEngine>(script.replay));
    ZmqBridgeConfig source;
    source.endpoint = engines.back()->endpoint();
    if (script.replay) source.replay_endpoint = engines.back()->replay_endpoint();
    source.conversion.worker_id = script.worker;
    source.conversion.block_size = kBlockSize;
    sources.push_back(source);
  }
  InProcessBridges bridges(bridged, sources);
  REQUIRE(bridges.start().ok());

  bus::ConnectionOptions options;
  options.url = server.url();
  auto publisher = bus::Connection::connect(options);
  REQUIRE(publisher.ok());
  std::uint64_t published = 0;
  std::uint64_t delivered_batches = 0;
  for (std::size_t s = 0; s < scripts.size(); ++s) {
    const EngineScript& script = scripts[s];
    engines[s]->wait_for_subscriber();
    std::uint64_t next_id = 0;
    for (std::size_t seq = 0; seq < script.batches.size(); ++seq) {
      engines[s]->publish(seq, pack_batch(script.batches[seq], script.rank, script.encoding), script.delivered[seq]);
      if (!script.delivered[seq] && !script.replay) {
        next_id += script.batches[seq].size();  // lost: the bridge skips its ids, so the service sees a gap
        continue;
      }
      ++delivered_batches;
      for (const EngineEvent& e : script.batches[seq]) {
        const RouterEvent r = direct_event(script.worker, script.rank, next_id++, e);
        REQUIRE(publisher.value().publish("fed.events." + std::to_string(script.worker), encode_router_event(r)).ok());
        ++published;
      }
    }
  }
  REQUIRE(publisher.value().flush().ok());
  REQUIRE(wait_until([&] {
    std::uint64_t n = 0;
    for (const auto& st : bridges.stats()) n += st.batches_delivered;
    return n == delivered_batches;
  }));
  bridges.stop();
  REQUIRE(fed.wait_for_acked_sequence(published, 20s));
  REQUIRE(bridged.indexer().flush() == IndexerStatus::ok);
  REQUIRE(fed.indexer().flush() == IndexerStatus::ok);

  for (const auto& st : bridges.stats()) {
    CHECK(st.sink_failures == 0);
    CHECK(st.malformed_frames == 0);
  }
  CHECK(bridges.stats()[0].replayed_batches == 1);
  CHECK(bridges.stats()[1].unrecovered_batches == 1);

  // Same ingestion path: the same counters, the lost batch a gap in both.
  const auto a = bridged.stats();
  const auto b = fed.stats();
  CHECK(a.local_batches == delivered_batches);
  CHECK(a.messages == 0);
  CHECK(b.messages == published);
  CHECK(a.events_applied == published);
  CHECK(b.events_applied == published);
  CHECK(a.gaps == 1);
  CHECK(b.gaps == 1);
  CHECK(a.missing_events == b.missing_events);
  CHECK(a.duplicates == b.duplicates);
  CHECK(a.resets == b.resets);

  // Same index: dumps and scores.
  const auto dump_a = bridged.indexer().dump_events();
  const auto dump_b = fed.indexer().dump_events();
  REQUIRE(dump_a.has_value());
  REQUIRE(dump_b.has_value());
  CHECK(holdings(*dump_a) == holdings(*dump_b));
  CHECK(holdings(*dump_a).size() == 4 + 2 + 3 + 2);

  const std::vector<std::vector<std::uint64_t>> image_blocks{{}, {0xAA}, {0xBB}};
  const std::vector<std::vector<LocalBlockHash>> queries = {
      compute_block_hashes(tokens(1, 12), kBlockSize),
      compute_block_hashes(concat(tokens(1, 8), tokens(21, 8)), kBlockSize),
      compute_block_hashes(tokens(1, 16), kBlockSize, BlockHashOptions{kBlockHashSeed, false, image_blocks}),
      compute_block_hashes(tokens(1, 12), kBlockSize, block_hash_seed("sql-adapter")),
      compute_block_hashes(tokens(1, 9), kBlockSize, BlockHashOptions{kBlockHashSeed, true, {}}),
      compute_block_hashes(tokens(100, 8), kBlockSize),
  };
  for (std::size_t i = 0; i < queries.size(); ++i) {
    CAPTURE(i);
    const auto via_bridge = bridged.indexer().find_matches(queries[i]);
    const auto fed_directly = fed.indexer().find_matches(queries[i]);
    CHECK(via_bridge.scores == fed_directly.scores);
    CHECK(via_bridge.frequencies == fed_directly.frequencies);
  }
  // The comparison is about real state: worker 1 holds 1..8 -> 21..28; worker 2's image blocks
  // match only the query carrying the same images; worker 3's Eagle blocks only Eagle queries.
  CHECK(bridged.indexer().find_matches(queries[1]).scores.at({1, 0}) == 4);
  const auto images = bridged.indexer().find_matches(queries[2]).scores;
  CHECK(images.at({2, 1}) == 3);
  CHECK(bridged.indexer().find_matches(queries[0]).scores.at({2, 1}) == 1);  // text-only: first block only
  CHECK(bridged.indexer().find_matches(queries[3]).scores.size() == 1);
  CHECK(bridged.indexer().find_matches(queries[4]).scores.at({3, 0}) == 2);
  CHECK_FALSE(bridged.indexer().find_matches(queries[0]).scores.contains({3, 0}));
  bridged.stop(false);
  fed.stop(false);
}

}  // TEST_SUITE("integration")
