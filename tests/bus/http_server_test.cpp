// HttpServer (the /metrics listener): idle connections are closed, the connection bound makes room
// for a new request by closing the oldest idle connection, and requests are answered meanwhile.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "libbus/http_server.h"
#include "tests/support/http_probe.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace std::chrono_literals;

namespace {

bus::HttpResponse answer(std::string_view, std::string_view target) {
  return bus::HttpResponse{200, "text/plain; charset=utf-8", "ok " + std::string(target) + "\n"};
}

}  // namespace

TEST_CASE("http server: a connection that sends no request is closed after the idle timeout") {
  bus::HttpServer server(answer, bus::HttpServerOptions{64, 300ms});
  std::string error;
  REQUIRE_MESSAGE(server.start("127.0.0.1", 0, error), error);
  const int idle = testing::connect_loopback(server.port());
  REQUIRE(idle >= 0);
  // Before: 30 s per connection, so a few hundred idle clients held the process's descriptors.
  CHECK(testing::closed_by_peer(idle, 3000ms));
  ::close(idle);
  REQUIRE(testing::wait_until([&] { return server.open_connections() == 0; }, 2000ms));
  auto reply = testing::http_get(server.port(), "/metrics");
  REQUIRE(reply.has_value());
  CHECK(reply->status == 200);
  CHECK(reply->body == "ok /metrics\n");
}

TEST_CASE(
    "http server: at the connection bound the oldest idle connection makes room and requests are still answered") {
  bus::HttpServer server(answer, bus::HttpServerOptions{3, 60000ms});
  std::string error;
  REQUIRE_MESSAGE(server.start("127.0.0.1", 0, error), error);
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(testing::connect_loopback(server.port()));
    REQUIRE(idle.back() >= 0);
    REQUIRE(testing::wait_until([&] { return server.open_connections() == idle.size(); }, 2000ms));
  }
  for (int round = 0; round < 5; ++round) {
    auto reply = testing::http_get(server.port(), "/healthz", 3000ms);
    REQUIRE_MESSAGE(reply.has_value(), "round " << round);
    CHECK(reply->status == 200);
    CHECK(server.open_connections() <= 3);
  }
  CHECK(testing::closed_by_peer(idle[0], 2000ms));  // the oldest idle one made room
  for (int fd : idle) ::close(fd);
  CHECK(server.accept_errors() == 0);
}
