// What every kvidx subcommand that talks to NATS shares, run as a user would: the --nats default
// ($NATS_URL, else nats://127.0.0.1:4222), exit 4 for a server that is down or refuses the
// credentials (with the password never printed), 1 for a missing input file; and `kvidx publish`
// reporting what the server acknowledged, exiting 5 with the count of what it did not.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <regex>

#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "replay/event_log_writer.h"
#include "tests/support/child_process.h"
#include "tests/support/connecting_commands.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_server.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

const std::string kKvidx = built_binary("kvidx");

std::vector<std::string> with(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

std::string name_of(const std::vector<std::string>& command) { return command.front(); }

// stats and dump pick the live mode with --nats; alone it means the default URL.
std::vector<std::string> nats_flag(const std::vector<std::string>& command, const std::string& url) {
  if (url.empty()) {
    if (name_of(command) == "stats" || name_of(command) == "dump") return {"--nats"};
    return {};
  }
  return {"--nats", url};
}

void write_log(const std::string& path, const std::vector<RouterEvent>& events) {
  EventLogWriter out(path);
  for (const auto& event : events) out.write(event);
  REQUIRE(out.close());
}

// A Stored event of `blocks` blocks: about 60 bytes of JSON per block.
RouterEvent event_with_blocks(WorkerId worker, std::uint64_t first, std::size_t blocks) {
  Hashes locals;
  for (std::size_t i = 0; i < blocks; ++i) locals.push_back(first + i);
  return make_store_event(worker, locals);
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("every connecting subcommand exits 4 when the server refuses the credentials, and never prints them") {
  NatsServer server(NatsServerOptions::with_args({"--user", "kvidx", "--pass", "right-secret"}));
  TempDir dir;
  write_log(dir.file("events.jsonl"), {make_store_event(1, {1, 2})});
  const std::string port = std::to_string(server.port());
  for (const std::string& url : {server.url(), "nats://kvidx:wrong-secret@127.0.0.1:" + port}) {
    for (const auto& command : connecting_commands(dir)) {
      CAPTURE(url);
      CAPTURE(name_of(command));
      auto result = run_command(with(with({kKvidx}, command), nats_flag(command, url)));
      CHECK(result.exit_code == 4);
      CHECK_MESSAGE(result.err.find("Authentication") != std::string::npos, result.err);
      CHECK(result.err.find("wrong-secret") == std::string::npos);
      CHECK(result.out.find("wrong-secret") == std::string::npos);
    }
  }
}

TEST_CASE("every connecting subcommand exits 4 with one line when no server listens") {
  TempDir dir;
  write_log(dir.file("events.jsonl"), {make_store_event(1, {1, 2})});
  const std::string url = "nats://127.0.0.1:" + std::to_string(find_free_port());
  for (const auto& command : connecting_commands(dir)) {
    CAPTURE(name_of(command));
    auto result = run_command(with(with({kKvidx}, command), nats_flag(command, url)));
    CHECK(result.exit_code == 4);
    CHECK_MESSAGE(result.err.find("cannot connect to " + url) != std::string::npos, result.err);
    if (name_of(command) != "serve") CHECK_MESSAGE(line_count(result.err) == 1, result.err);
  }
}

TEST_CASE("--nats defaults to $NATS_URL on every subcommand, credentials hidden") {
  NatsServer server(NatsServerOptions::with_args({"--user", "kvidx", "--pass", "right-secret"}));
  TempDir dir;
  write_log(dir.file("events.jsonl"), {make_store_event(1, {1, 2})});
  const std::string port = std::to_string(server.port());
  const std::string env = "NATS_URL=nats://kvidx:wrong-secret@127.0.0.1:" + port;
  for (const auto& command : connecting_commands(dir)) {
    CAPTURE(name_of(command));
    // No URL given: the subcommand must go to $NATS_URL (this server refuses the password).
    auto result = run_command(with(with({"/usr/bin/env", env, kKvidx}, command), nats_flag(command, "")));
    CHECK(result.exit_code == 4);
    CHECK_MESSAGE(result.err.find("nats://***@127.0.0.1:" + port) != std::string::npos, result.err);
    CHECK(result.err.find("wrong-secret") == std::string::npos);
    auto help = run_command({kKvidx, name_of(command), "--help"});
    CHECK(help.out.find("default: $NATS_URL, else nats://127.0.0.1:4222") != std::string::npos);
  }
  // With the right credentials in $NATS_URL a live command goes through.
  auto served = ChildProcess({"/usr/bin/env", "NATS_URL=nats://kvidx:right-secret@127.0.0.1:" + port, kKvidx, "serve",
                              "--metrics", "off", "--snapshot-interval", "0"},
                             dir.file("serve.log"));
  bool answered = false;
  for (int attempt = 0; attempt < 100 && !answered; ++attempt) {
    answered = run_command({"/usr/bin/env", "NATS_URL=nats://kvidx:right-secret@127.0.0.1:" + port, kKvidx, "stats",
                            "--nats", "--timeout", "0.5"})
                   .exit_code == 0;
  }
  CHECK(answered);
  CHECK(served.stop() == 0);
  std::ifstream log(dir.file("serve.log.err"));
  const std::string serve_log((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(serve_log.find("right-secret") == std::string::npos);
}

TEST_CASE("a missing input file exits 1 with one line on every subcommand, before any connection") {
  TempDir dir;
  const std::string missing = dir.file("nope.jsonl");
  const std::string unreachable = "nats://127.0.0.1:" + std::to_string(find_free_port());
  const std::vector<std::vector<std::string>> commands = {
      {"publish", "--nats", unreachable, "--events", missing},
      {"score", "--nats", unreachable, "--tokens-file", missing, "--block-size", "4"},
      {"serve", "--nats", unreachable, "--config", missing, "--check-config"},
      {"replay", "--events", missing},
      {"dump", "--events", missing},
      {"stats", "--events", missing},
  };
  for (const auto& command : commands) {
    CAPTURE(name_of(command));
    auto result = run_command(with({kKvidx}, command));
    CHECK(result.exit_code == 1);
    CHECK_MESSAGE(line_count(result.err) == 1, result.err);
    CHECK(result.err.find(missing + ": cannot open: No such file or directory") != std::string::npos);
  }
}

TEST_CASE("kvidx publish counts what JetStream acknowledged: no stream captures the subjects, exit 5") {
  NatsServer server;
  TempDir dir;
  {
    bus::ConnectionOptions options;
    options.url = server.url();
    auto connection = bus::Connection::connect(options);
    REQUIRE(connection.ok());
    auto js = bus::JetStream::create(connection.value());
    REQUIRE(js.ok());
    REQUIRE(js.value().ensure_stream({"KV_EVENTS", {"kv.events.>"}}).ok());
  }
  std::vector<RouterEvent> events;
  for (WorkerId w = 1; w <= 7; ++w) events.push_back(make_store_event(w, {w, w + 1}));
  write_log(dir.file("events.jsonl"), events);

  auto captured = run_command({kKvidx, "publish", "--nats", server.url(), "--events", dir.file("events.jsonl")});
  CHECK_MESSAGE(captured.exit_code == 0, captured.err);
  CHECK(captured.err.find("7 events published (jetstream) and acknowledged by the server, of 7 read") !=
        std::string::npos);

  // The stream exists, but nothing captures other.events.*: the server answers every publish with an error.
  auto lost = run_command(
      {kKvidx, "publish", "--nats", server.url(), "--events", dir.file("events.jsonl"), "--subject-prefix", "other"});
  INFO(lost.err);
  CHECK(lost.exit_code == 5);
  CHECK(lost.err.find("0 events published (jetstream) and acknowledged by the server, of 7 read") != std::string::npos);
  CHECK(lost.err.find("7 of 7 events NOT acknowledged: 7 answered with an error (first: No responders") !=
        std::string::npos);
}

TEST_CASE("kvidx publish names the events the server did not take: larger than max_payload, exit 5") {
  TempDir dir;
  {
    std::ofstream config(dir.file("nats.conf"));
    config << "max_payload: 2048\n";
  }
  NatsServer server(NatsServerOptions::with_args({"-c", dir.file("nats.conf")}));
  {
    bus::ConnectionOptions options;
    options.url = server.url();
    auto connection = bus::Connection::connect(options);
    REQUIRE(connection.ok());
    CHECK(connection.value().max_payload() == 2048);
    auto js = bus::JetStream::create(connection.value());
    REQUIRE(js.ok());
    REQUIRE(js.value().ensure_stream({"KV_EVENTS", {"kv.events.>"}}).ok());
  }
  // 5 events, the 2nd and 4th of ~6 KB: over the server's max_payload.
  write_log(dir.file("events.jsonl"),
            {event_with_blocks(1, 1, 2), event_with_blocks(2, 100, 100), event_with_blocks(3, 300, 2),
             event_with_blocks(4, 400, 100), event_with_blocks(5, 600, 2)});
  for (const char* mode : {"core", "jetstream"}) {
    CAPTURE(mode);
    auto result =
        run_command({kKvidx, "publish", "--nats", server.url(), "--events", dir.file("events.jsonl"), "--mode", mode});
    INFO(result.err);
    CHECK(result.exit_code == 5);
    CHECK(result.err.find("3 events published (" + std::string(mode) + ") and acknowledged by the server, of 5 read") !=
          std::string::npos);
    CHECK(result.err.find("2 of 5 events NOT acknowledged: 2 refused before sending (first: ") != std::string::npos);
    CHECK(std::regex_search(result.err, std::regex("[Pp]ayload")));
  }
}

}  // TEST_SUITE("integration")
