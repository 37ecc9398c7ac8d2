// The live CLI when things go wrong or get big: `kvidx dump --nats` of a 30000-block chain returns
// every block and survives a restart (the snapshot), a dump that lost chunks or that the service
// failed exits non-zero, and `kvidx score` / `kvidx stats` read replies over the server's
// max_payload. Real nats-server and `kvidx serve`; the misbehaving "services" are plain NATS
// responders speaking the dump protocol wrong on purpose.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "libbus/nats_connection.h"
#include "libbus/nats_message.h"
#include "libcodec/event_codec.h"
#include "replay/event_log_writer.h"
#include "tests/support/child_process.h"
#include "tests/support/dump_holdings.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_client.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;
using namespace std::chrono_literals;
using Json = nlohmann::json;

using kvidx::testing::connect_to;

namespace {

const std::string kKvidx = built_binary("kvidx");

std::size_t blocks_in(const std::string& jsonl) {
  std::size_t n = 0;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) n += Json::parse(line)["event"]["data"]["stored"]["blocks"].size();
  }
  return n;
}

void publish_dump_message(bus::Connection& conn, std::string_view inbox, std::string_view body, const char* kind) {
  auto m = bus::Message::create(inbox, body);
  REQUIRE(m.ok());
  REQUIRE(m.value().set_header("Kvidx-Dump", kind).ok());
  REQUIRE(conn.publish(m.value()).ok());
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("cli: kvidx dump --nats returns every block of a worker's 30000-block chain, before and after a restart") {
  NatsServer server;
  TempDir dir;
  {
    EventLogWriter log(dir.file("chain.jsonl"));
    for (const auto& e : make_long_chain(5, 0, 30000, 100)) log.write(e);
    REQUIRE(log.close());
  }
  const std::vector<std::string> serve_args = {
      kKvidx, "serve", "--nats", server.url(), "--metrics", "off", "--snapshot-interval", "1s"};
  std::string live;
  {
    ChildProcess serve(serve_args, dir.file("serve-1.log"));
    REQUIRE(wait_until(
        [&] {
          return run_command({kKvidx, "stats", "--nats", server.url(), "--timeout", "1"}).exit_code == 0;
        },
        20s));
    auto published = run_command({kKvidx, "publish", "--nats", server.url(), "--events", dir.file("chain.jsonl")});
    REQUIRE_MESSAGE(published.exit_code == 0, published.err);
    // Before: the dump printed nothing and exited 0, and every snapshot failed.
    CommandResult dump;
    REQUIRE_MESSAGE(wait_until(
                        [&] {
                          dump = run_command({kKvidx, "dump", "--nats", server.url()});
                          return dump.exit_code == 0 && blocks_in(dump.out) == 30000;
                        },
                        30s),
                    "exit " << dump.exit_code << ": " << dump.err);
    live = dump.out;
    REQUIRE(wait_until([&] { return read_text(dir.file("serve-1.log")).find("snapshot written") != std::string::npos; },
                       10s));
    auto tree = run_command({kKvidx, "dump", "--nats", server.url(), "--tree"});
    REQUIRE_MESSAGE(tree.exit_code == 0, tree.err);
    CHECK(tree.out.find("(30000 blocks) 5/0") != std::string::npos);
    CHECK(serve.stop() == 0);
    CHECK(read_text(dir.file("serve-1.log")).find("snapshot failed") == std::string::npos);
  }
  ChildProcess again(serve_args, dir.file("serve-2.log"));
  CommandResult restored;
  REQUIRE(wait_until(
      [&] {
        restored = run_command({kKvidx, "dump", "--nats", server.url(), "--timeout", "1"});
        return restored.exit_code == 0;
      },
      20s));
  CHECK(blocks_in(restored.out) == 30000);
  CHECK(dump_holdings(restored.out) == dump_holdings(live));
  CHECK(again.stop() == 0);
}

TEST_CASE(
    "cli: kvidx dump --nats exits 5 when chunks are missing or the end never comes and 1 when the service failed") {
  NatsServer server;
  bus::Connection responder = connect_to(server);
  std::atomic<int> mode{0};
  const std::string line = encode_router_event(make_store_event(1, {1, 2})) + "\n";
  auto sub = responder.subscribe("kv.admin.dump", [&](bus::Message request) {
    const std::string inbox(request.reply());
    switch (mode.load()) {
      case 0:  // one of two chunks lost on the way
        publish_dump_message(responder, inbox, line, "chunk");
        publish_dump_message(responder, inbox, R"({"end":true,"events":2,"chunks":2})", "end");
        break;
      case 1:  // the service stops midway: no end marker
        publish_dump_message(responder, inbox, line, "chunk");
        break;
      case 2:  // the service could not dump
        publish_dump_message(responder, inbox,
                             R"({"error":{"code":"internal","message":"dump failed after 3 chunk(s): boom"}})", "end");
        break;
      default:  // all there
        publish_dump_message(responder, inbox, line, "chunk");
        publish_dump_message(responder, inbox, R"({"end":true,"events":1,"chunks":1})", "end");
    }
    responder.flush();
  });
  REQUIRE(sub.ok());
  REQUIRE(responder.flush().ok());

  mode = 0;
  auto lost = run_command({kKvidx, "dump", "--nats", server.url(), "--timeout", "2"});
  CHECK(lost.exit_code == 5);
  CHECK(lost.err.find("dump incomplete: received 1 events in 1 chunk(s), the service sent 2 in 2") !=
        std::string::npos);
  CHECK(lost.out.empty());

  mode = 1;
  auto unfinished = run_command({kKvidx, "dump", "--nats", server.url(), "--timeout", "1"});
  CHECK(unfinished.exit_code == 5);
  CHECK(unfinished.err.find("no end marker") != std::string::npos);

  mode = 2;
  auto failed = run_command({kKvidx, "dump", "--nats", server.url(), "--timeout", "2"});
  CHECK(failed.exit_code == 1);
  CHECK(failed.err.find("the service failed the dump (internal): dump failed after 3 chunk(s): boom") !=
        std::string::npos);

  mode = 3;
  auto whole = run_command({kKvidx, "dump", "--nats", server.url(), "--timeout", "2"});
  CHECK_MESSAGE(whole.exit_code == 0, whole.err);
  CHECK(blocks_in(whole.out) == 2);
}

TEST_CASE("cli: kvidx score and stats --nats read replies larger than the server's max_payload") {
  NatsServer server(NatsServerOptions::with_max_payload(4096));
  TempDir dir;
  {
    EventLogWriter log(dir.file("workers.jsonl"));
    for (WorkerId w = 1; w <= 2000; ++w) log.write(make_store_event(w, {1, 2}));
    REQUIRE(log.close());
  }
  ChildProcess serve({kKvidx, "serve", "--nats", server.url(), "--metrics", "off", "--snapshot-interval", "0"},
                     dir.file("serve.log"));
  REQUIRE(wait_until(
      [&] {
        return run_command({kKvidx, "stats", "--nats", server.url(), "--timeout", "1"}).exit_code == 0;
      },
      20s));
  auto published = run_command({kKvidx, "publish", "--nats", server.url(), "--events", dir.file("workers.jsonl")});
  REQUIRE_MESSAGE(published.exit_code == 0, published.err);
  CommandResult stats;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        stats = run_command({kKvidx, "stats", "--nats", server.url()});
                        return stats.exit_code == 0 && Json::parse(stats.out)["streams"] == 2000;
                      },
                      30s),
                  stats.err);
  CHECK(Json::parse(stats.out)["blocks"] == 4000);
  // Before: the 2000-stream reply was dropped by the service and the client timed out (exit 4).
  auto score = run_command({kKvidx, "score", "--nats", server.url(), "--hashes", "1,2"});
  REQUIRE_MESSAGE(score.exit_code == 0, score.err);
  const Json reply = Json::parse(score.out);
  REQUIRE(reply["scores"].size() == 2000);
  CHECK(reply["scores"][0] == Json::parse(R"({"worker_id":1,"dp_rank":0,"score":2})"));
  CHECK(reply["tree_sizes"].size() == 2000);
  CHECK(serve.stop() == 0);
}

}  // TEST_SUITE("integration")
