// The live CLI against a real service: publish → serve; capture records the same stream; score,
// stats and dump read the service; and an offline replay of the capture equals the live dump.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "replay/event_log_writer.h"
#include "tests/support/child_process.h"
#include "tests/support/dump_holdings.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

const std::string kKvidx = built_binary("kvidx");

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("capture --out - keeps stdout to the event log while NATS restarts, and logs the reconnect on stderr") {
  NatsServer server;
  TempDir dir;
  {
    EventLogWriter log(dir.file("events.jsonl"));
    log.write(make_store_event(1, {1, 2, 3}));
    REQUIRE(log.close());
  }
  ChildProcess capture({kKvidx, "capture", "--nats", server.url(), "--out", "-", "--max", "1", "--duration", "60"},
                       dir.file("capture.log"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let capture subscribe
  server.restart();
  REQUIRE_MESSAGE(
      wait_until([&] { return read_text(dir.file("capture.log.err")).find("NATS reconnected") != std::string::npos; },
                 std::chrono::seconds(30)),
      read_text(dir.file("capture.log")));
  const auto published =
      run_command({kKvidx, "publish", "--nats", server.url(), "--mode", "core", "--events", dir.file("events.jsonl")});
  REQUIRE_MESSAGE(published.exit_code == 0, published.err);
  REQUIRE(wait_until([&] { return !capture.running(); }, std::chrono::seconds(30)));
  // Every line of stdout is a captured event: the warning and the reconnect went to stderr.
  const std::string out = read_text(dir.file("capture.log"));
  std::istringstream lines(out);
  std::size_t events = 0;
  for (std::string line; std::getline(lines, line); ++events) {
    CHECK_MESSAGE(nlohmann::json::accept(line), line);
  }
  CHECK(events == 1);
  CHECK(read_text(dir.file("capture.log.err")).find("NATS connection lost") != std::string::npos);
}

TEST_CASE("capture of a live stream replays to the service's own dump, score and stats read the service") {
  NatsServer server;
  TempDir dir;
  // 40 workers x 2 ranks: chains sharing a system prompt, some removals.
  {
    EventLogWriter log(dir.file("events.jsonl"));
    for (WorkerId w = 1; w <= 40; ++w) {
      for (DpRank r = 0; r < 2; ++r) {
        auto e = make_store_event_with_dp_rank(w, {1, 2, 3}, r);
        e.event.event_id = 0;
        log.write(e);
        auto tail = make_store_event_with_parent(w, {1, 2, 3}, {100 + w, 200 + w});
        tail.event.dp_rank = r;
        tail.event.event_id = 1;
        log.write(tail);
        if (w % 3 == 0) {
          auto removal = remove_event(w, 2, r, remove_hashes_with_parent({1, 2, 3, 100 + w}, {200 + w}));
          log.write(removal);
        }
      }
    }
    REQUIRE(log.close());
  }
  ChildProcess serve({kKvidx, "serve", "--nats", server.url(), "--metrics", "off", "--snapshot-interval", "0"},
                     dir.file("serve.log"));
  // The service creates the events stream; publish waits for it.
  REQUIRE(wait_until(
      [&] {
        return run_command({kKvidx, "stats", "--nats", server.url(), "--timeout", "1"}).exit_code == 0;
      },
      std::chrono::seconds(20)));
  ChildProcess capture({kKvidx, "capture", "--nats", server.url(), "--out", dir.file("captured.jsonl.gz"), "--max",
                        "186", "--duration", "30"},
                       dir.file("capture.log"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let capture subscribe
  auto published = run_command({kKvidx, "publish", "--nats", server.url(), "--events", dir.file("events.jsonl")});
  REQUIRE_MESSAGE(published.exit_code == 0, published.err);
  CHECK(published.err.find("186 events published (jetstream)") != std::string::npos);
  CHECK(capture.stop(0) >= 0);
  REQUIRE(wait_until([&] { return !capture.running(); }, std::chrono::seconds(30)));

  // Wait until the service has applied everything (120 streams + 80 tails - removed tails).
  std::string live;
  REQUIRE(wait_until(
      [&] {
        auto dump = run_command({kKvidx, "dump", "--nats", server.url()});
        live = dump.out;
        return dump.exit_code == 0 && dump_holdings(live).size() == 80 * 5 - 26 * 1;
      },
      std::chrono::seconds(30)));

  auto offline = run_command({kKvidx, "dump", "--events", dir.file("captured.jsonl.gz")});
  REQUIRE_MESSAGE(offline.exit_code == 0, offline.err);
  CHECK(dump_holdings(offline.out) == dump_holdings(live));

  auto score = run_command({kKvidx, "score", "--nats", server.url(), "--hashes", "1,2,3,104,204"});
  REQUIRE_MESSAGE(score.exit_code == 0, score.err);
  const auto reply = nlohmann::json::parse(score.out);
  REQUIRE(reply["scores"].size() == 80);
  CHECK(reply["scores"][0] == nlohmann::json::parse(R"({"worker_id":1,"dp_rank":0,"score":3})"));
  CHECK(reply["scores"][6] == nlohmann::json::parse(R"({"worker_id":4,"dp_rank":0,"score":5})"));

  auto stats = run_command({kKvidx, "stats", "--nats", server.url()});
  REQUIRE_MESSAGE(stats.exit_code == 0, stats.err);
  const auto s = nlohmann::json::parse(stats.out);
  CHECK(s["workers"] == 40);
  CHECK(s["streams"] == 80);
  CHECK(s["blocks"] == 80 * 5 - 26);
  CHECK(s["edge_lengths_from"] == "dump");

  CHECK(serve.stop() == 0);  // graceful: drains, final snapshot, exit 0
  auto unreachable = run_command({kKvidx, "score", "--nats", server.url(), "--hashes", "1", "--timeout", "0.5"});
  CHECK(unreachable.exit_code == 4);
}

}  // TEST_SUITE("integration")
