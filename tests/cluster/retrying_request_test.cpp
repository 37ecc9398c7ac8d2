// The client side of a failover (libbus/retrying_request.h): a read-only request nobody answers at
// first (no replica subscribed, or the one that took it died) is answered by a retry; a request that
// keeps getting no answer fails within the overall deadline, after every attempt.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "libbus/retrying_request.h"
#include "tests/faults/fault_support.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsServer;

TEST_SUITE("cluster") {

TEST_CASE("cluster: a request no replica answers at first is answered by its retry, else fails in time") {
  NatsServer server;
  bus::Connection client = connect_to(server);
  bus::Connection replica = connect_to(server);
  bus::RetryPolicy policy;
  policy.retries = 2;
  policy.timeout_ms = 3000;

  // Nobody subscribed: every attempt gets "no responders"; the whole request fails within the deadline.
  const auto t0 = Clock::now();
  auto none = bus::request_retrying(client, "kv.query.scores", "{}", policy);
  REQUIRE_FALSE(none.ok());
  CHECK((none.error().status == NATS_NO_RESPONDERS || none.error().timed_out()));
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(policy.timeout_ms + 1000));

  // A replica that swallows the first request (killed mid-request), then answers: the retry is answered.
  std::atomic<int> seen{0};
  auto sub = replica.queue_subscribe("kv.query.scores", "kvidx", [&](bus::Message m) {
    if (seen.fetch_add(1) == 0) return;  // lost
    (void)replica.publish(m.reply(), R"({"scores":[]})");
  });
  REQUIRE(sub.ok());
  REQUIRE(replica.flush().ok());
  auto answered = bus::request_retrying(client, "kv.query.scores", "{}", policy);
  REQUIRE_MESSAGE(answered.ok(), answered.error().message);
  CHECK(answered.value().attempts == 2);
  CHECK(answered.value().body == R"({"scores":[]})");
  CHECK(seen.load() == 2);

  // Without retries the lost request is a failure (what the retry saves a router from).
  seen = 0;
  policy.retries = 0;
  policy.timeout_ms = 500;
  auto once = bus::request_retrying(client, "kv.query.scores", "{}", policy);
  CHECK_FALSE(once.ok());
}

}  // TEST_SUITE("cluster")
