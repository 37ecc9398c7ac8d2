// PullConsumer and OrderedStreamReader against a real nats-server: late messages of an earlier
// pull request are returned by the next fetch (the condition in which libnats 3.4.1's Fetch
// overran its array), a message delivered but never received makes the ordered reader re-read
// from it instead of acknowledging past it, and a stream hole (retention) is accepted and counted.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/nats_pull_consumer.h"
#include "libbus/ordered_stream_reader.h"
#include "tests/support/nats_client.h"
#include "tests/support/nats_server.h"

using namespace kvidx::bus;
using kvidx::testing::NatsServer;

using kvidx::testing::connect_to;

namespace {

// Stream "T_PULL" on t.pull.> with messages "0".."n-1" (stream sequences 1..n).
JetStream stream_with(Connection& conn, int n) {
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  REQUIRE(js.value().ensure_stream({"T_PULL", {"t.pull.>"}, true, 0, 0, 0}).ok());
  for (int i = 0; i < n; ++i)
    REQUIRE(js.value().publish_async("t.pull." + std::to_string(i % 3), std::to_string(i)).ok());
  REQUIRE(js.value().publish_async_complete(10000).ok());
  return std::move(js).value();
}

std::vector<std::uint64_t> sequences_of(const std::vector<Message>& msgs) {
  std::vector<std::uint64_t> out;
  for (const Message& m : msgs) out.push_back(m.stream_sequence());
  return out;
}

// Reads until `count` messages arrived (bounded number of fetches), acking each batch.
std::vector<std::uint64_t> read_all(Connection& conn, OrderedStreamReader& reader, std::size_t count, int batch) {
  std::vector<std::uint64_t> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got.size() < count && std::chrono::steady_clock::now() < deadline) {
    auto fetched = reader.fetch(batch, 200);
    REQUIRE_MESSAGE(fetched.ok(), fetched.error().message);
    for (std::uint64_t s : sequences_of(fetched.value())) got.push_back(s);
    if (!fetched.value().empty()) REQUIRE(jetstream_ack(conn, fetched.value().back()).ok());
  }
  return got;
}

std::vector<std::uint64_t> range(std::uint64_t first, std::uint64_t last) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("bus: a pull consumer returns a late request's messages in a later fetch, each once and in order") {
  NatsServer server;
  Connection conn = connect_to(server);
  JetStream js = stream_with(conn, 3000);
  ConsumerSpec spec;
  spec.durable = "late";
  REQUIRE(js.ensure_consumer("T_PULL", spec).ok());
  auto pull = PullConsumer::bind(conn, "T_PULL", "late");
  REQUIRE(pull.ok());
  // A 1 ms fetch of 1000 returns long before the server has sent the whole batch: the rest arrives
  // after it returned and is queued when the next fetch starts (more than half a batch, often).
  std::vector<std::uint64_t> got;
  auto first = pull.value().fetch(1000, 1);
  REQUIRE(first.ok());
  CHECK(first.value().size() < 1000);
  for (std::uint64_t s : sequences_of(first.value())) got.push_back(s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int round = 0; got.size() < 3000 && std::chrono::steady_clock::now() < deadline; ++round) {
    auto batch = pull.value().fetch(round % 2 == 0 ? 1000 : 700, 200);
    REQUIRE_MESSAGE(batch.ok(), batch.error().message);
    CHECK(batch.value().size() <= 1000);
    for (std::uint64_t s : sequences_of(batch.value())) got.push_back(s);
    if (!batch.value().empty()) REQUIRE(jetstream_ack(conn, batch.value().back()).ok());
  }
  INFO("got " << got.size() << " first " << (got.empty() ? 0 : got.front()) << " last "
              << (got.empty() ? 0 : got.back()));
  CHECK(got == range(1, 3000));
}

TEST_CASE("bus: a pull consumer waiting on a durable that is deleted returns an error") {
  NatsServer server;
  Connection conn = connect_to(server);
  JetStream js = stream_with(conn, 1);
  ConsumerSpec spec;
  spec.durable = "gone";
  REQUIRE(js.ensure_consumer("T_PULL", spec).ok());
  auto pull = PullConsumer::bind(conn, "T_PULL", "gone");
  REQUIRE(pull.ok());
  auto first = pull.value().fetch(10, 500);
  REQUIRE(first.ok());
  CHECK(first.value().size() == 1);
  // The next fetch finds nothing and waits on the server; the durable is deleted meanwhile (409).
  std::thread deleter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Connection admin = connect_to(server);
    auto admin_js = JetStream::create(admin);
    REQUIRE(admin_js.ok());
    REQUIRE(admin_js.value().delete_consumer("T_PULL", "gone").ok());
  });
  auto waiting = pull.value().fetch(10, 3000);
  deleter.join();
  REQUIRE_FALSE(waiting.ok());
  CHECK(waiting.error().message.find("409") != std::string::npos);
}

TEST_CASE("bus: the ordered reader re-creates a durable deleted behind its back and reads on") {
  NatsServer server;
  Connection conn = connect_to(server);
  JetStream js = stream_with(conn, 5);
  ConsumerSpec spec;
  spec.durable = "recreated";
  auto reader = OrderedStreamReader::open(conn, js, "T_PULL", spec);
  REQUIRE(reader.ok());
  CHECK(read_all(conn, reader.value(), 5, 10) == range(1, 5));
  REQUIRE(js.delete_consumer("T_PULL", "recreated").ok());
  for (int i = 5; i < 8; ++i) REQUIRE(js.publish("t.pull.0", std::to_string(i)).ok());
  // Nothing answers pull requests for a missing durable; the reader notices within its idle check.
  CHECK(read_all(conn, reader.value(), 3, 10) == range(6, 8));
  CHECK(reader.value().resets() >= 1);
}

TEST_CASE("bus: the ordered reader re-reads a message that was delivered but never received instead of skipping it") {
  NatsServer server;
  Connection conn = connect_to(server);
  JetStream js = stream_with(conn, 20);
  ConsumerSpec spec;
  spec.durable = "ordered";
  auto reader = OrderedStreamReader::open(conn, js, "T_PULL", spec);
  REQUIRE_MESSAGE(reader.ok(), reader.error().message);
  auto first = reader.value().fetch(3, 1000);
  REQUIRE(first.ok());
  CHECK(sequences_of(first.value()) == range(1, 3));
  REQUIRE(jetstream_ack(conn, first.value().back()).ok());
  // Sequence 4 is delivered to another client of the same durable: for the reader it is a message
  // lost in flight (the server counts it delivered and waits for its ack).
  {
    auto thief = PullConsumer::bind(conn, "T_PULL", "ordered");
    REQUIRE(thief.ok());
    auto stolen = thief.value().fetch(1, 1000);
    REQUIRE(stolen.ok());
    REQUIRE(sequences_of(stolen.value()) == std::vector<std::uint64_t>{4});
  }
  const auto rest = read_all(conn, reader.value(), 17, 5);
  CHECK(rest == range(4, 20));
  CHECK(reader.value().resets() == 1);
  CHECK(reader.value().holes() == 0);
  CHECK(reader.value().last_sequence() == 20);
}

TEST_CASE("bus: a filtered ordered reader (a shard's) skips other subjects and re-reads a delivery lost in flight") {
  NatsServer server;
  Connection conn = connect_to(server);
  JetStream js = stream_with(conn, 21);  // t.pull.1 holds sequences 2, 5, 8, ..., 20
  ConsumerSpec spec;
  spec.durable = "filtered";
  spec.filter_subject = "t.pull.1";
  auto reader = OrderedStreamReader::open(conn, js, "T_PULL", spec);
  REQUIRE_MESSAGE(reader.ok(), reader.error().message);
  auto first = reader.value().fetch(2, 1000);
  REQUIRE(first.ok());
  CHECK(sequences_of(first.value()) == std::vector<std::uint64_t>{2, 5});
  REQUIRE(jetstream_ack(conn, first.value().back()).ok());
  // The next delivery (sequence 8) goes to another client of the same durable: lost in flight for
  // the reader, which sees delivery 4 after 2 (stream sequences skip by design here).
  {
    auto thief = PullConsumer::bind(conn, "T_PULL", "filtered");
    REQUIRE(thief.ok());
    auto stolen = thief.value().fetch(1, 1000);
    REQUIRE(stolen.ok());
    REQUIRE(sequences_of(stolen.value()) == std::vector<std::uint64_t>{8});
  }
  const auto rest = read_all(conn, reader.value(), 5, 5);
  CHECK(rest == std::vector<std::uint64_t>{8, 11, 14, 17, 20});
  CHECK(reader.value().resets() == 1);
  CHECK(reader.value().holes() == 0);
  CHECK(reader.value().last_sequence() == 20);
}

TEST_CASE("bus: the ordered reader accepts and counts a hole left by retention") {
  NatsServer server;
  Connection conn = connect_to(server);
  JetStream js = stream_with(conn, 12);
  ConsumerSpec spec;
  spec.durable = "holes";
  auto reader = OrderedStreamReader::open(conn, js, "T_PULL", spec);
  REQUIRE(reader.ok());
  auto first = reader.value().fetch(3, 1000);
  REQUIRE(first.ok());
  CHECK(sequences_of(first.value()) == range(1, 3));
  REQUIRE(jetstream_ack(conn, first.value().back()).ok());
  // Purge down to the newest 3 messages (10..12): 4..9 are gone before the reader gets to them.
  REQUIRE(js.purge("T_PULL", "", 3).ok());
  const auto rest = read_all(conn, reader.value(), 3, 10);
  CHECK(rest == range(10, 12));
  CHECK(reader.value().holes() == 6);
}

}  // TEST_SUITE("integration")
