// Ingest throughput benchmark (skipped by default; run with
//   kvidx_bus_tests --no-skip -tc="bench*"  [KVIDX_BENCH_EVENTS=N]
// ). Reports events/s through kvidx in both modes next to a raw nats.c consumer in the same run.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "libbus/codec/event_codec.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/service.h"
#include "libindexer/lane_indexer.h"
#include "tests/support/nats_server.h"

using namespace kvidx;
using namespace kvidx::bus;
using kvidx::testing::NatsServer;
using Clock = std::chrono::steady_clock;

namespace {

std::size_t bench_events() {
  const char* env = std::getenv("KVIDX_BENCH_EVENTS");
  return env ? std::strtoull(env, nullptr, 10) : 200000;
}

// `events` Stored events over 128 streams (64 workers x 2 ranks), `per_message` events per message.
std::vector<std::pair<std::string, std::string>> make_messages(std::size_t events, std::size_t per_message) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::uint64_t> next_id(128, 0);
  std::vector<RouterEvent> batch;
  for (std::size_t i = 0; i < events;) {
    const std::size_t s = (i / per_message) % 128;
    batch.clear();
    for (std::size_t k = 0; k < per_message && i < events; ++k, ++i) {
      RouterEvent e;
      e.worker_id = s / 2 + 1;
      e.event.dp_rank = static_cast<DpRank>(s % 2);
      e.event.event_id = next_id[s]++;
      KvCacheStoreData d;
      for (std::uint64_t b = 0; b < 4; ++b) {
        const std::uint64_t h = (e.event.event_id % 512) * 16 + b + 1;
        d.blocks.push_back(StoredBlock{{h * 1000003 + b}, {h}, std::nullopt});
      }
      e.event.data = d;
      batch.push_back(e);
    }
    out.emplace_back("kv.events." + std::to_string(s / 2 + 1),
                     per_message == 1 ? encode_router_event(batch[0]) : encode_router_events(batch));
  }
  return out;
}

Connection connect(const NatsServer& server) { return std::move(Connection::connect({server.url()})).value(); }

double raw_core_rate(const NatsServer& server, const std::vector<std::pair<std::string, std::string>>& msgs) {
  Connection sub_conn = connect(server);
  Connection pub = connect(server);
  std::atomic<std::size_t> got{0};
  auto sub = sub_conn.subscribe("kv.events.>", [&](Message) { got.fetch_add(1, std::memory_order_relaxed); });
  REQUIRE(sub.ok());
  REQUIRE(sub.value().set_unlimited_pending().ok());
  REQUIRE(sub_conn.flush().ok());
  const auto t0 = Clock::now();
  for (const auto& [subject, body] : msgs) REQUIRE(pub.publish(subject, body).ok());
  REQUIRE(pub.flush(30000).ok());
  while (got.load() < msgs.size()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return static_cast<double>(msgs.size()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

double kvidx_core_rate(const NatsServer& server, const std::vector<std::pair<std::string, std::string>>& msgs,
                       std::size_t events) {
  ServiceConfig c;
  c.nats_url = server.url();
  c.mode = IngestMode::core;
  c.serve_queries = false;
  c.lanes = 2;
  KvidxService service(c);
  REQUIRE(service.start().ok());
  Connection pub = connect(server);
  const auto t0 = Clock::now();
  for (const auto& [subject, body] : msgs) REQUIRE(pub.publish(subject, body).ok());
  REQUIRE(pub.flush(30000).ok());
  while (service.stats().events_applied < events) std::this_thread::sleep_for(std::chrono::microseconds(200));
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  return static_cast<double>(events) / std::chrono::duration<double>(Clock::now() - t0).count();
}

void fill_stream(const NatsServer& server, const std::string& stream,
                 const std::vector<std::pair<std::string, std::string>>& msgs) {
  Connection conn = connect(server);
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  REQUIRE(js.value().ensure_stream({stream, {"kv.events.>"}, true, 0, 0}).ok());
  for (const auto& [subject, body] : msgs) REQUIRE(js.value().publish_async(subject, body).ok());
  REQUIRE(js.value().publish_async_complete(60000).ok());
}

double raw_jetstream_rate(const NatsServer& server, std::size_t count) {
  Connection conn = connect(server);
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  ConsumerSpec spec;
  spec.durable = "raw";
  spec.max_ack_pending = 200000;
  REQUIRE(js.value().ensure_consumer("KV_EVENTS", spec).ok());
  auto pull = js.value().pull_subscribe("KV_EVENTS", "raw", {});
  REQUIRE(pull.ok());
  std::size_t got = 0;
  const auto t0 = Clock::now();
  while (got < count) {
    auto batch = pull.value().fetch(1000, 2000);
    REQUIRE(batch.ok());
    if (batch.value().empty()) continue;
    got += batch.value().size();
    REQUIRE(batch.value().back().ack().ok());  // cumulative (AckAll)
  }
  return static_cast<double>(count) / std::chrono::duration<double>(Clock::now() - t0).count();
}

double kvidx_jetstream_rate(const NatsServer& server, std::uint64_t last_sequence, std::size_t events) {
  ServiceConfig c;
  c.nats_url = server.url();
  c.serve_queries = false;
  c.lanes = 2;
  c.durable = "bench";
  c.snapshot_interval = std::chrono::milliseconds(0);
  KvidxService service(c);
  const auto t0 = Clock::now();
  REQUIRE(service.start().ok());
  REQUIRE(service.wait_for_acked_sequence(last_sequence, std::chrono::seconds(300)));
  const double rate = static_cast<double>(events) / std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(service.stats().events_applied == events);
  return rate;
}

}  // namespace

TEST_CASE("bench: end-to-end ingest rate in both modes next to the raw nats.c rate" * doctest::skip(true)) {
  const std::size_t events = bench_events();
  for (std::size_t per_message : {std::size_t{1}, std::size_t{16}}) {
    NatsServer server;
    const auto msgs = make_messages(events, per_message);
    const double raw_core = raw_core_rate(server, msgs);
    const double core = kvidx_core_rate(server, msgs, events);
    fill_stream(server, "KV_EVENTS", msgs);
    const double raw_js = raw_jetstream_rate(server, msgs.size());
    const double js = kvidx_jetstream_rate(server, msgs.size(), events);
    std::printf(
        "events=%zu per_message=%zu messages=%zu\n"
        "  core:      raw nats.c %.0f msg/s (= %.0f events/s), kvidx %.0f events/s (%.0f%%)\n"
        "  jetstream: raw nats.c pull+ack %.0f msg/s (= %.0f events/s), kvidx %.0f events/s (%.0f%%)\n",
        events, per_message, msgs.size(), raw_core, raw_core * static_cast<double>(per_message), core,
        100.0 * core / (raw_core * static_cast<double>(per_message)), raw_js, raw_js * static_cast<double>(per_message),
        js, 100.0 * js / (raw_js * static_cast<double>(per_message)));
  }
}

TEST_CASE("bench: offline decode and lane apply rates for the same events" * doctest::skip(true)) {
  const std::size_t events = bench_events();
  const auto msgs = make_messages(events, 1);
  auto t0 = Clock::now();
  std::vector<RouterEvent> decoded;
  decoded.reserve(events);
  for (const auto& m : msgs) decoded.push_back(std::move(decode_router_events(m.second).value()[0]));
  const double decode_rate = static_cast<double>(events) / std::chrono::duration<double>(Clock::now() - t0).count();
  LaneIndexer indexer(2);
  t0 = Clock::now();
  for (auto& e : decoded) indexer.enqueue_event(std::move(e));
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  const double apply_rate = static_cast<double>(events) / std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("offline: decode %.0f events/s on one thread, LaneIndexer(2) apply %.0f events/s\n", decode_rate, apply_rate);
}
