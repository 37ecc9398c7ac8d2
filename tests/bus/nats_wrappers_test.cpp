// Integration tests of the libbus RAII wrappers against a real nats-server (loopback only).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/nats_pull_consumer.h"
#include "tests/support/nats_client.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx::bus;
using kvidx::testing::connect_to;
using kvidx::testing::NatsServer;
using kvidx::testing::wait_until;

TEST_SUITE("integration") {

TEST_CASE("bus: connecting to a closed port is an error value, not a crash") {
  ConnectionOptions options;
  options.url = "nats://127.0.0.1:" + std::to_string(kvidx::testing::find_free_port());
  options.max_reconnect = 0;
  auto conn = Connection::connect(options);
  REQUIRE_FALSE(conn.ok());
  CHECK(conn.error().status != NATS_OK);
  CHECK(conn.error().message.find("connect to") == 0);
}

TEST_CASE("bus: published messages reach an async subscriber in order with headers") {
  NatsServer server;
  Connection sub_conn = connect_to(server);
  Connection pub_conn = connect_to(server);
  std::mutex mutex;
  std::vector<std::string> got;
  std::optional<std::string> header;
  auto sub = sub_conn.subscribe("t.order", [&](Message msg) {
    std::lock_guard lock(mutex);
    if (got.empty()) header = msg.header("X-Test");
    got.emplace_back(msg.data());
  });
  REQUIRE_MESSAGE(sub.ok(), sub.error().message);
  REQUIRE(sub.value().set_unlimited_pending().ok());
  REQUIRE(sub_conn.flush().ok());

  auto first = Message::create("t.order", "m0");
  REQUIRE(first.ok());
  REQUIRE(first.value().set_header("X-Test", "yes").ok());
  REQUIRE(pub_conn.publish(first.value()).ok());
  for (int i = 1; i < 1000; ++i) REQUIRE(pub_conn.publish("t.order", "m" + std::to_string(i)).ok());
  REQUIRE(pub_conn.flush().ok());
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mutex);
    return got.size() == 1000;
  }));
  std::lock_guard lock(mutex);
  for (int i = 0; i < 1000; ++i) CHECK(got[static_cast<std::size_t>(i)] == "m" + std::to_string(i));
  CHECK(header == std::string("yes"));
  CHECK(sub.value().dropped() == 0);
}

TEST_CASE("bus: destroying a subscription waits for its running handler") {
  NatsServer server;
  Connection conn = connect_to(server);
  std::atomic<bool> in_handler{false};
  std::atomic<bool> handler_done{false};
  {
    auto sub = conn.subscribe("t.slow", [&](Message) {
      in_handler = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      handler_done = true;
    });
    REQUIRE(sub.ok());
    REQUIRE(conn.flush().ok());
    REQUIRE(conn.publish("t.slow", "x").ok());
    REQUIRE(conn.flush().ok());
    REQUIRE(wait_until([&] { return in_handler.load(); }));
  }  // ~Subscription
  CHECK(handler_done.load());
}

TEST_CASE("bus: request reply through a queue group responder") {
  NatsServer server;
  Connection responder = connect_to(server, "kvidx-test", /*send_asap=*/true);
  Connection client = connect_to(server);
  auto sub = responder.queue_subscribe("svc.echo", "kvidx", [&](Message msg) {
    std::string reply = "echo:";
    reply += msg.data();
    CHECK(responder.publish(msg.reply(), reply).ok());
  });
  REQUIRE(sub.ok());
  REQUIRE(responder.flush().ok());
  for (int i = 0; i < 20; ++i) {
    auto reply = client.request("svc.echo", "hi" + std::to_string(i), 2000);
    REQUIRE_MESSAGE(reply.ok(), reply.error().message);
    CHECK(reply.value().data() == "echo:hi" + std::to_string(i));
  }
  auto none = client.request("svc.nobody", "x", 200);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().status != NATS_OK);
  CHECK(client.max_payload() > 0);
}

TEST_CASE("bus: jetstream stream with a durable pull consumer survives a server restart") {
  NatsServer server;
  {
    Connection conn = connect_to(server);
    auto js = JetStream::create(conn);
    REQUIRE(js.ok());
    auto stream = js.value().ensure_stream({"T_EVENTS", {"t.events.>"}, true, 0, 0});
    REQUIRE_MESSAGE(stream.ok(), stream.error().message);
    // Idempotent: a second ensure (e.g. another replica starting) succeeds.
    REQUIRE(js.value().ensure_stream({"T_EVENTS", {"t.events.>"}, true, 0, 0}).ok());
    for (int i = 0; i < 100; ++i) {
      REQUIRE(js.value().publish_async("t.events." + std::to_string(i % 4), std::to_string(i)).ok());
    }
    REQUIRE(js.value().publish_async_complete(10000).ok());
    auto ack = js.value().publish("t.events.9", "last");
    REQUIRE(ack.ok());
    CHECK(ack.value().stream == "T_EVENTS");
    CHECK(ack.value().sequence == 101);

    ConsumerSpec spec;
    spec.durable = "reader";
    spec.filter_subject = "t.events.>";
    spec.ack_all = true;
    REQUIRE(js.value().ensure_consumer("T_EVENTS", spec).ok());
    auto pull = PullConsumer::bind(conn, "T_EVENTS", "reader");
    REQUIRE_MESSAGE(pull.ok(), pull.error().message);
    auto batch = pull.value().fetch(60, 2000);
    REQUIRE(batch.ok());
    REQUIRE(batch.value().size() == 60);
    CHECK(batch.value()[0].data() == "0");
    auto meta = batch.value().back().metadata();
    REQUIRE(meta.ok());
    CHECK(meta.value().stream_sequence == 60);
    for (const Message& m : batch.value()) {
      auto full = m.metadata();
      REQUIRE(full.ok());
      CHECK(m.stream_sequence() == full.value().stream_sequence);  // the allocation-free parse agrees
    }
    // AckAll: acking the 60th acknowledges 1..60.
    REQUIRE(jetstream_ack_sync(conn, batch.value().back(), 2000).ok());
    auto state = js.value().consumer_state("T_EVENTS", "reader");
    REQUIRE(state.ok());
    CHECK(state.value().ack_floor_stream_sequence == 60);
  }
  server.restart();
  Connection conn = connect_to(server);
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  auto stream = js.value().stream_state("T_EVENTS");
  REQUIRE(stream.ok());
  CHECK(stream.value().last_sequence == 101);
  auto pull = PullConsumer::bind(conn, "T_EVENTS", "reader");
  REQUIRE_MESSAGE(pull.ok(), pull.error().message);
  std::vector<std::string> rest;
  while (rest.size() < 41) {
    auto batch = pull.value().fetch(100, 2000);
    REQUIRE(batch.ok());
    REQUIRE_FALSE(batch.value().empty());
    for (auto& m : batch.value()) rest.emplace_back(m.data());
    REQUIRE(jetstream_ack(conn, batch.value().back()).ok());
  }
  CHECK(rest.front() == "60");
  CHECK(rest.back() == "last");
  auto last = js.value().get_last_message("T_EVENTS", "t.events.9");
  REQUIRE(last.ok());
  CHECK(last.value().data() == "last");
  auto first = js.value().get_message("T_EVENTS", 1);
  REQUIRE(first.ok());
  CHECK(first.value().data() == "0");
  auto missing = js.value().get_last_message("T_EVENTS", "t.events.none");
  CHECK_FALSE(missing.ok());
}

TEST_CASE("bus: nats server fixture kill -9 and restart keeps the jetstream store") {
  NatsServer server;
  const int port = server.port();
  {
    Connection conn = connect_to(server);
    auto js = JetStream::create(conn);
    REQUIRE(js.ok());
    REQUIRE(js.value().ensure_stream({"T_K", {"t.k.>"}, true, 0, 0}).ok());
    REQUIRE(js.value().publish("t.k.1", "a").ok());
  }
  server.kill9();
  CHECK_FALSE(server.running());
  server.restart();
  CHECK(server.port() == port);
  Connection conn = connect_to(server);
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  auto state = js.value().stream_state("T_K");
  REQUIRE(state.ok());
  CHECK(state.value().messages == 1);
}

}  // TEST_SUITE("integration")
