// TLS against a real nats-server with certificates the test makes (tests/support/test_pki.h):
// mutual TLS (`verify: true`) works on every connecting subcommand with --tlsca/--tlscert/--tlskey,
// and every way TLS can fail (no client certificate, a server signed by an untrusted CA, plain text
// to a TLS server, --tlsfirst) is one line and a fixed exit code.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "replay/event_log_writer.h"
#include "tests/security/security_support.h"
#include "tests/support/connecting_commands.h"
#include "tests/support/event_builders.h"
#include "tests/support/test_pki.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;
using namespace std::chrono_literals;

namespace {

void write_events(const std::string& path) {
  EventLogWriter out(path);
  out.write(make_store_event(1, {1, 2, 3}));
  out.write(make_store_event(2, {1, 2}));
  REQUIRE(out.close());
}

}  // namespace

TEST_SUITE("security") {

TEST_CASE("mutual TLS: serve, publish, score, stats, dump and workers work with --tlsca, --tlscert and --tlskey") {
  TempDir dir;
  const TestPki pki = make_test_pki(dir.path());
  NatsServer server(server_with_config(dir, tls_block(pki.server_cert, pki.server_key, pki.ca_cert, true)));
  const std::string url = "tls://127.0.0.1:" + std::to_string(server.port());
  const std::vector<std::string> tls = {"--nats",        url,        "--tlsca",     pki.ca_cert, "--tlscert",
                                        pki.client_cert, "--tlskey", pki.client_key};
  write_events(dir.file("events.jsonl"));
  ChildProcess serve(with({kvidx_binary(), "serve", "--metrics", "off"}, tls), dir.file("serve.log"));
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        return run_command(with({kvidx_binary(), "workers", "--timeout", "0.5"}, tls)).exit_code == 0;
                      },
                      30s),
                  slurp(dir.file("serve.log.err")));

  auto published = run_command(with({kvidx_binary(), "publish", "--events", dir.file("events.jsonl")}, tls));
  CHECK_MESSAGE(published.exit_code == 0, published.err);
  nlohmann::json reply;
  CHECK(wait_until(
      [&] {
        auto score = run_command(with({kvidx_binary(), "score", "--hashes", "1,2,3"}, tls));
        if (score.exit_code != 0) return false;
        reply = nlohmann::json::parse(score.out);
        return reply["scores"].size() == 2 && reply["scores"][0]["score"] == 3;
      },
      15s));
  CHECK(reply["scores"][0] == nlohmann::json::parse(R"({"worker_id":1,"dp_rank":0,"score":3})"));
  CHECK(reply["scores"][1] == nlohmann::json::parse(R"({"worker_id":2,"dp_rank":0,"score":2})"));
  auto stats = run_command(with({kvidx_binary(), "stats"}, tls));
  REQUIRE_MESSAGE(stats.exit_code == 0, stats.err);
  CHECK(nlohmann::json::parse(stats.out)["blocks"] == 5);
  auto dump = run_command(with({kvidx_binary(), "dump"}, tls));
  CHECK_MESSAGE(dump.exit_code == 0, dump.err);
  CHECK(line_count(dump.out) >= 2);
  // A tls:// URL with only the CA (no client certificate) is refused by this server: verify is on.
  auto no_cert = run_command({kvidx_binary(), "workers", "--nats", url, "--tlsca", pki.ca_cert, "--timeout", "1"});
  CHECK(no_cert.exit_code == 4);
  CHECK(serve.stop() == 0);
}

TEST_CASE("TLS failures are one line and exit 4 on every connecting subcommand") {
  TempDir dir;
  const TestPki pki = make_test_pki(dir.path());
  write_events(dir.file("events.jsonl"));
  TempDir rogue_dir;
  NatsServer server(server_with_config(dir, tls_block(pki.server_cert, pki.server_key, pki.ca_cert, true)));
  NatsServer rogue(
      server_with_config(rogue_dir, tls_block(pki.rogue_server_cert, pki.rogue_server_key, pki.rogue_ca_cert, false)));
  const std::string port = std::to_string(server.port());
  struct Case {
    const char* what;
    std::vector<std::string> options;
  };
  const std::vector<Case> cases = {
      {"no client certificate", {"--nats", "tls://127.0.0.1:" + port, "--tlsca", pki.ca_cert}},
      {"a server signed by an untrusted CA",
       {"--nats", "tls://127.0.0.1:" + std::to_string(rogue.port()), "--tlsca", pki.ca_cert, "--tlscert",
        pki.client_cert, "--tlskey", pki.client_key}},
      {"plain text to a TLS server", {"--nats", "nats://127.0.0.1:" + port}},
  };
  for (const Case& c : cases) {
    for (const auto& command : connecting_commands(dir)) {
      CAPTURE(c.what);
      CAPTURE(command.front());
      auto result = run_command(with(with({kvidx_binary()}, command), c.options));
      CHECK(result.exit_code == 4);
      CHECK_MESSAGE(result.err.find("cannot connect to") != std::string::npos, result.err);
      if (command.front() != "serve") CHECK_MESSAGE(line_count(result.err) == 1, result.err);
    }
  }
  // Usage errors: exit 2 before connecting.
  auto first = run_command({kvidx_binary(), "workers", "--nats", "tls://127.0.0.1:" + port, "--tlsfirst"});
  CHECK(first.exit_code == 2);
  CHECK(first.err.find("--tlsfirst") != std::string::npos);
  auto half =
      run_command({kvidx_binary(), "workers", "--nats", "tls://127.0.0.1:" + port, "--tlscert", pki.client_cert});
  CHECK(half.exit_code == 2);
  CHECK(half.err.find("--tlskey") != std::string::npos);
  auto missing =
      run_command({kvidx_binary(), "workers", "--nats", "tls://127.0.0.1:" + port, "--tlsca", dir.file("nope.pem")});
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("cannot read --tlsca") != std::string::npos);
}

}  // TEST_SUITE("security")
