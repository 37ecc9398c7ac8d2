// `kvidx serve` run with a low RLIMIT_NOFILE (prlimit) until its /metrics listener cannot accept
// (EMFILE): the failure is logged and counted, and once descriptors are free again /metrics and
// /healthz answer. Before, the accept loop ended silently and the listener never answered again.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/http_probe.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;
using namespace std::chrono_literals;

TEST_SUITE("faults") {

TEST_CASE("serve: /metrics answers again after the process ran out of file descriptors") {
  NatsServer nats;
  TempDir dir;
  const int port = find_free_port();
  const std::string log = dir.file("serve.log");
  // NOTE: prlimit sets the limit on itself and then executes kvidx: the child's pid is kvidx's.
  ChildProcess serve(
      {"/usr/bin/prlimit", "--nofile=64:64", built_binary("kvidx"), "--log-level", "info", "serve", "--nats",
       nats.url(), "--metrics", "127.0.0.1:" + std::to_string(port), "--snapshot-interval", "0", "--durable", "fds"},
      log);
  auto ok = [&](const std::string& path) {
    auto reply = http_get(port, path, 1000ms);
    return reply.has_value() && reply->status == 200;
  };
  REQUIRE_MESSAGE(wait_until([&] { return ok("/readyz"); }, 30s), read_text(log) << read_text(log + ".err"));

  // Hold 150 connections: the kernel queues them for the listener, kvidx accepts until it has no
  // descriptor left (64 in all), then every accept fails with EMFILE.
  std::vector<int> held;
  for (int i = 0; i < 150; ++i) {
    const int fd = connect_loopback(port);
    if (fd >= 0) held.push_back(fd);
  }
  CHECK(held.size() == 150);
  CHECK(wait_until([&] { return read_text(log).find("HTTP accept failed") != std::string::npos; }, 10s));
  CHECK(serve.running());
  for (int fd : held) ::close(fd);

  CHECK_MESSAGE(wait_until([&] { return ok("/metrics") && ok("/healthz"); }, 15s), read_text(log)
                                                                                       << read_text(log + ".err"));
  auto metrics = http_get(port, "/metrics");
  REQUIRE(metrics.has_value());
  CHECK(metrics->body.find("kvidx_http_accept_errors_total 0\n") == std::string::npos);
  CHECK(metrics->body.find("kvidx_http_accept_errors_total ") != std::string::npos);
  CHECK(wait_until([&] { return read_text(log).find("HTTP accepting again after") != std::string::npos; }, 5s));
  CHECK(serve.stop() == 0);
}

}  // TEST_SUITE("faults")
