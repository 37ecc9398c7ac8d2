// `kvidx serve --zmq SPEC` (the built binary): two fake vLLM engines bridged in-process; score,
// dump and stats against the running service show their events; SIGTERM stops cleanly.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "tests/bridge/fake_vllm_engine.h"
#include "tests/support/child_process.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx::testing;
using Json = nlohmann::json;

namespace {

const std::string kKvidx = built_binary("kvidx");

// Block hashes held per worker in a dump printed as JSON Lines.
std::set<std::pair<std::uint64_t, std::uint64_t>> held(const std::string& jsonl) {
  std::set<std::pair<std::uint64_t, std::uint64_t>> out;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const Json doc = Json::parse(line);
    for (const Json& block : doc["event"]["data"]["stored"]["blocks"]) {
      out.emplace(doc["worker_id"].get<std::uint64_t>(), block["block_hash"].get<std::uint64_t>());
    }
  }
  return out;
}

EngineStored stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                    std::vector<std::uint32_t> tokens, bool bigrams = false) {
  EngineStored s;
  s.hashes = std::move(hashes);
  s.parent = parent;
  s.tokens = std::move(tokens);
  s.block_size = 4;
  s.bigrams = bigrams;
  return s;
}

std::string score(const NatsServer& server, const std::string& tokens_file, bool eagle) {
  std::vector<std::string> args{kKvidx,          "score",     "--nats",       server.url(),
                                "--tokens-file", tokens_file, "--block-size", "4"};
  if (eagle) args.push_back("--eagle");
  auto result = run_command(args);
  REQUIRE_MESSAGE(result.exit_code == 0, result.err);
  return result.out;
}

}  // namespace

TEST_SUITE("integration") {
TEST_CASE("kvidx_serve_with_zmq_sources_indexes_fake_engines_for_score_dump_and_stats") {
  NatsServer server;
  TempDir dir;
  FakeVllmEngine plain(/*with_replay=*/true);
  FakeVllmEngine eagle(/*with_replay=*/false);
  ChildProcess serve({kKvidx, "serve", "--nats", server.url(), "--metrics", "off", "--snapshot-interval", "0", "--zmq",
                      plain.endpoint() + ",worker=3,block-size=4,replay=" + plain.replay_endpoint(), "--zmq",
                      eagle.endpoint() + ",worker=4,block-size=4,dp-rank=1,eagle"},
                     dir.file("serve.log"));
  plain.wait_for_subscriber(std::chrono::seconds(30));
  eagle.wait_for_subscriber(std::chrono::seconds(30));

  // Engine 3: tokens 1..8 then 9..12 (the second batch missed live, filled from the replay socket).
  plain.publish(0, pack_batch({stored({301, 302}, std::nullopt, {1, 2, 3, 4, 5, 6, 7, 8})}));
  plain.publish(1, pack_batch({stored({303}, 302, {9, 10, 11, 12})}), /*deliver=*/false);
  plain.publish(2, pack_batch({EngineRemoved{{999}}}));  // reveals the gap; removes nothing held
  // Engine 4 (rank 1 from the spec, the batches carry none): Eagle bigrams of tokens 1..9.
  BatchEncoding no_rank;
  no_rank.with_rank = false;
  eagle.publish(0, pack_batch({stored({401, 402}, std::nullopt, {1, 2, 3, 4, 5, 6, 7, 8, 9}, true)}, 0, no_rank));

  std::string dump;
  REQUIRE(wait_until(
      [&] {
        auto result = run_command({kKvidx, "dump", "--nats", server.url()});
        dump = result.out;
        return result.exit_code == 0 && held(dump).size() == 5;
      },
      std::chrono::seconds(30)));
  CHECK(held(dump) ==
        std::set<std::pair<std::uint64_t, std::uint64_t>>{{3, 301}, {3, 302}, {3, 303}, {4, 401}, {4, 402}});

  const std::string tokens_file = dir.file("prompt.json");
  std::ofstream(tokens_file) << "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]";
  const Json plain_scores = Json::parse(score(server, tokens_file, false));
  CHECK(plain_scores["scores"] == Json::parse(R"([{"worker_id":3,"dp_rank":0,"score":3}])"));
  const Json eagle_scores = Json::parse(score(server, tokens_file, true));
  CHECK(eagle_scores["scores"] == Json::parse(R"([{"worker_id":4,"dp_rank":1,"score":2}])"));

  auto stats = run_command({kKvidx, "stats", "--nats", server.url()});
  REQUIRE_MESSAGE(stats.exit_code == 0, stats.err);
  const Json s = Json::parse(stats.out);
  CHECK(s["local_batches"] == 4);
  CHECK(s["messages"] == 0);
  CHECK(s["events_applied"] == 4);
  CHECK(s["gaps"] == 0);
  CHECK(s["streams"] == 2);

  CHECK(serve.stop() == 0);
  std::ifstream log_in(dir.file("serve.log"));
  const std::string log((std::istreambuf_iterator<char>(log_in)), std::istreambuf_iterator<char>());
  CHECK(log.find("zmq " + plain.endpoint() + ": 3 batches -> 3 events; gaps 1 (missing 1, replayed 1, lost 0)") !=
        std::string::npos);
}

TEST_CASE("kvidx_serve_rejects_a_bad_zmq_spec_and_check_config_lists_the_sources") {
  auto bad = run_command({kKvidx, "serve", "--check-config", "--zmq", "tcp://127.0.0.1:5557,worker=3"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("bad --zmq 'tcp://127.0.0.1:5557,worker=3': block-size: required") != std::string::npos);
  auto good = run_command({kKvidx, "serve", "--check-config", "--zmq", "tcp://127.0.0.1:5557,worker=3,block-size=16",
                           "--zmq", "tcp://127.0.0.1:5567,worker=4,block-size=16,eagle"});
  REQUIRE_MESSAGE(good.exit_code == 0, good.err);
  CHECK(good.out.find("2 zmq sources") != std::string::npos);
  CHECK(good.out.find("zmq tcp://127.0.0.1:5567 as worker 4 rank 0, block size 16, eagle") != std::string::npos);
}

}  // TEST_SUITE("integration")
