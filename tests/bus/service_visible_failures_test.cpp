// Failures that must be visible and must not stick (KvidxService against a real nats-server): a
// long edge in snapshots and dumps, max_payload changing on a reconnect, snapshot failures counted,
// logged on state changes and turning readiness off when stale, readiness while catching up, and
// replies larger than max_payload.
#include <doctest/doctest.h>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "libbus/chunked_reply.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/service.h"
#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"
#include "tests/support/event_histories.h"
#include "tests/support/nats_client.h"
#include "tests/support/nats_server.h"
#include "tests/support/service_configs.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::bus;
using kvidx::testing::NatsServer;
using kvidx::testing::normal_form;
using Json = nlohmann::json;
using namespace std::chrono_literals;

using kvidx::testing::connect_to;
using kvidx::testing::service_config_for;

namespace {

const char* const kClientName = "kvidx-visible-failures-test";

void ensure_events_stream(Connection& conn) {
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  REQUIRE(js.value().ensure_stream(StreamSpec{"KV_EVENTS", {"kv.events.>"}, true, 0, 0, 0}).ok());
}

// Publishes `events` one per message on kv.events.<worker> (JetStream); returns the last sequence.
std::uint64_t publish_all(Connection& conn, const std::vector<RouterEvent>& events) {
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  Subjects subjects;
  for (const RouterEvent& e : events)
    REQUIRE(js.value().publish_async(subjects.events(e.worker_id), encode_router_event(e)).ok());
  REQUIRE(js.value().publish_async_complete(60000).ok());
  auto state = js.value().stream_state("KV_EVENTS");
  REQUIRE(state.ok());
  return state.value().last_sequence;
}

std::set<testing::BlockKey> service_normal_form(KvidxService& service) {
  auto dump = service.indexer().dump_events();
  REQUIRE(dump.has_value());
  return normal_form(*dump);
}

// kv.admin.dump read to its end marker, checking every message fits `max_payload` and the end
// marker's counts equal what arrived.
std::vector<RouterEvent> admin_dump_checked(Connection& client, std::int64_t max_payload) {
  const std::string inbox = client.new_inbox();
  auto sub = client.subscribe_sync(inbox);
  REQUIRE(sub.ok());
  REQUIRE(sub.value().set_unlimited_pending().ok());
  auto request = Message::create(Subjects().admin_dump(), "{}", inbox);
  REQUIRE(request.ok());
  REQUIRE(client.publish(request.value()).ok());
  std::vector<RouterEvent> events;
  std::size_t chunks = 0;
  while (true) {
    auto msg = sub.value().next(10000);
    REQUIRE_MESSAGE(msg.ok(), "dump: no message after " << events.size() << " events: " << msg.error().message);
    CHECK(static_cast<std::int64_t>(msg.value().data().size()) <= max_payload);
    if (msg.value().header("Kvidx-Dump") == std::string("end")) {
      const Json end = Json::parse(msg.value().data());
      REQUIRE_MESSAGE(end.contains("end"), end.dump());
      CHECK(end.at("events") == events.size());
      CHECK(end.at("chunks") == chunks);
      return events;
    }
    ++chunks;
    std::string_view rest = msg.value().data();
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      auto e = decode_router_event(rest.substr(0, nl));
      REQUIRE_MESSAGE(e.ok(), e.error().message());
      events.push_back(std::move(e).value());
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
}

std::size_t stored_blocks(const std::vector<RouterEvent>& events) {
  std::size_t n = 0;
  for (const auto& e : events) n += std::get<KvCacheStoreData>(e.event.data).blocks.size();
  return n;
}

// Collects the service's log lines (spdlog's default logger) while it is installed.
class LogCapture : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::size_t count(std::string_view needle) {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& line : lines_) n += line.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
  std::string all() {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& line : lines_) out += line + "\n";
    return out;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::vector<std::string> lines_;
};

// Installs a LogCapture on the default logger for the scope (no service may be running around it).
struct ScopedLogCapture {
  std::shared_ptr<LogCapture> sink = std::make_shared<LogCapture>();
  ScopedLogCapture() { spdlog::default_logger()->sinks().push_back(sink); }
  ~ScopedLogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  }
};

std::optional<double> metric_value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return std::nullopt;
  return std::stod(text.substr(at + series.size() + 2));
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE(
    "service: a worker with a 30000-block chain is snapshotted and restored into a fresh service and dumped whole") {
  NatsServer server;
  Connection client = connect_to(server, kClientName);
  const auto chain = testing::make_long_chain(11, 0, 30000, 100);  // 300 messages of 100 blocks
  std::set<testing::BlockKey> before;
  {
    KvidxService service(service_config_for(server, "long"));
    REQUIRE(service.start().ok());
    const std::uint64_t last = publish_all(client, chain);
    REQUIRE(service.wait_for_acked_sequence(last, std::chrono::seconds(60)));
    CHECK(service.stats().events_applied == 300);
    before = service_normal_form(service);
    REQUIRE(before.size() == 30000);
    // Before: "snapshot: one event exceeds the chunk limit", at every interval, for ever.
    auto written = service.snapshot_now();
    REQUIRE_MESSAGE(written.ok(), written.error().message);
    CHECK(service.stats().snapshot_failures == 0);
    const auto dumped = admin_dump_checked(client, client.max_payload());
    CHECK(dumped.size() > 1);  // the edge went out as several chained events
    CHECK(stored_blocks(dumped) == 30000);
    CHECK(normal_form(dumped) == before);
    service.stop(false);
  }
  KvidxService fresh(service_config_for(server, "long"));
  auto started = fresh.start();
  REQUIRE_MESSAGE(started.ok(), started.error().message);
  CHECK(fresh.stats().messages == 0);  // everything came from the snapshot
  CHECK(service_normal_form(fresh) == before);
  const auto dumped = admin_dump_checked(client, client.max_payload());
  CHECK(normal_form(dumped) == before);
}

TEST_CASE(
    "service: snapshot and dump chunks follow the server's max_payload after a reconnect to a server with a smaller "
    "one") {
  NatsServer server;
  std::set<testing::BlockKey> before;
  {
    KvidxService service(service_config_for(server, "mp"));
    REQUIRE(service.start().ok());
    {
      Connection client = connect_to(server, kClientName);
      std::vector<RouterEvent> events;
      for (WorkerId w = 1; w <= 40; ++w) {
        auto chain = testing::make_long_chain(w, 0, 60, 60);  // 40 distinct 60-block chains, ~3.5 KB each
        events.insert(events.end(), chain.begin(), chain.end());
      }
      const std::uint64_t last = publish_all(client, events);
      REQUIRE(service.wait_for_acked_sequence(last, std::chrono::seconds(60)));
    }
    before = service_normal_form(service);
    REQUIRE(before.size() == 40 * 60);

    // The same server comes back with max_payload 8 KiB: the service reconnects; its next snapshot
    // must be cut for 8 KiB, not for the 1 MiB it saw at start.
    server.set_max_payload(8192);
    server.restart();
    Connection client = connect_to(server, kClientName);
    REQUIRE(client.max_payload() == 8192);
    bool snapshot_ok = false;
    std::string last_error;
    REQUIRE(testing::wait_until(
        [&] {
          auto s = service.snapshot_now();
          snapshot_ok = s.ok();
          if (!snapshot_ok) last_error = s.error().message;
          return snapshot_ok;
        },
        std::chrono::seconds(30), std::chrono::milliseconds(200)));
    CHECK_MESSAGE(snapshot_ok, last_error);
    // NOTE: the snapshot went out on the service's ingest connection; its responders have their own
    // connection, which may still be reconnecting ("No responders" meanwhile): wait until it answers.
    REQUIRE(testing::wait_until([&] { return client.request(Subjects().admin_stats(), "{}", 1000).ok(); },
                                std::chrono::seconds(30), std::chrono::milliseconds(100)));
    const auto dumped = admin_dump_checked(client, 8192);
    CHECK(normal_form(dumped) == before);
    service.stop(false);
  }
  KvidxService fresh(service_config_for(server, "mp"));
  auto started = fresh.start();
  REQUIRE_MESSAGE(started.ok(), started.error().message);
  CHECK(fresh.stats().messages == 0);
  CHECK(service_normal_form(fresh) == before);
}

TEST_CASE(
    "service: snapshot failures are counted and logged once per state change and a stale snapshot makes the service "
    "not ready") {
  NatsServer server;
  Connection client = connect_to(server, kClientName);
  ScopedLogCapture logs;
  ServiceConfig config = service_config_for(server, "stale");
  config.snapshot_interval = std::chrono::milliseconds(100);
  config.snapshot_stale_after = std::chrono::milliseconds(1500);
  {
    KvidxService service(config);
    REQUIRE(service.start().ok());
    const std::uint64_t last = publish_all(client, testing::make_long_chain(1, 0, 10, 1));
    REQUIRE(service.wait_for_acked_sequence(last, std::chrono::seconds(30)));
    REQUIRE(testing::wait_until([&] { return service.stats().snapshots_written >= 2; }, std::chrono::seconds(10)));
    REQUIRE(service.readiness().ready);

    // Someone deletes the snapshot stream: every write fails from now on.
    auto js = JetStream::create(client);
    REQUIRE(js.ok());
    REQUIRE(js.value().delete_stream("KV_SNAPSHOTS").ok());
    REQUIRE(testing::wait_until([&] { return service.stats().snapshot_failures >= 5; }, std::chrono::seconds(10)));
    const std::string metrics = service.render_metrics();
    CHECK(metric_value(metrics, "kvidx_snapshot_failures_total").value_or(0) >= 5);
    CHECK(logs.sink->count("snapshot failed:") == 1);  // the first failure, not every interval
    CHECK(service.healthy());                          // liveness stays up

    REQUIRE(testing::wait_until([&] { return !service.readiness().ready; }, std::chrono::seconds(10)));
    const Readiness stale = service.readiness();
    CHECK(stale.snapshot_stale);
    CHECK(stale.reason.find("snapshot stale") != std::string::npos);
    CHECK(metric_value(service.render_metrics(), "kvidx_ready") == 0.0);
    CHECK(metric_value(service.render_metrics(), "kvidx_snapshot_stale") == 1.0);
    CHECK(metric_value(service.render_metrics(), "kvidx_snapshot_age_seconds").value_or(0) > 1.5);
    auto stats = client.request(Subjects().admin_stats(), "{}", 2000);
    REQUIRE(stats.ok());
    const Json s = Json::parse(stats.value().data());
    CHECK(s.at("ready") == false);
    CHECK(s.at("snapshot_stale") == true);
    CHECK(s.at("not_ready_reason").get<std::string>().find("snapshot stale") != std::string::npos);
    CHECK(s.at("snapshot_failures").get<std::uint64_t>() >= 5);
    REQUIRE(testing::wait_until([&] { return logs.sink->count("snapshot stale:") == 1; }, std::chrono::seconds(5)));

    // The stream comes back: the next snapshot succeeds, readiness returns, logged once each.
    REQUIRE(js.value().ensure_stream(StreamSpec{"KV_SNAPSHOTS", {"kv.snapshots.>"}, true, 0, 0}).ok());
    REQUIRE(testing::wait_until([&] { return service.readiness().ready; }, std::chrono::seconds(10)));
    REQUIRE(testing::wait_until([&] { return logs.sink->count("snapshot no longer stale") == 1; },
                                std::chrono::seconds(5)));
    CHECK(logs.sink->count("snapshots recovered after") == 1);
    CHECK(logs.sink->count("snapshot failed:") == 1);
    CHECK(metric_value(service.render_metrics(), "kvidx_snapshot_stale") == 0.0);
    service.stop(false);
  }
  INFO(logs.sink->all());
}

TEST_CASE(
    "service: not ready until the newest snapshot is restored and the consumer caught up with the stream's end at "
    "start") {
  NatsServer server;
  Connection client = connect_to(server, kClientName);
  ensure_events_stream(client);
  std::vector<RouterEvent> backlog;
  for (WorkerId w = 1; w <= 100; ++w) {
    auto chain = testing::make_long_chain(w, 0, 300, 1);  // 300 one-block events per worker
    backlog.insert(backlog.end(), chain.begin(), chain.end());
  }
  const std::uint64_t last = publish_all(client, backlog);
  REQUIRE(last == 30000);

  ServiceConfig config = service_config_for(server, "catchup");
  config.fetch_batch = 100;
  KvidxService service(config);
  CHECK_FALSE(service.readiness().ready);
  CHECK(service.readiness().reason.find("starting") != std::string::npos);
  CHECK(service.healthy());  // alive while starting
  REQUIRE(service.start().ok());
  const Readiness early = service.readiness();
  CHECK_FALSE(early.ready);
  CHECK(early.reason.find("catching up") != std::string::npos);
  CHECK(early.reason.find("of 30000") != std::string::npos);
  REQUIRE(testing::wait_until([&] { return service.readiness().ready; }, std::chrono::seconds(60)));
  CHECK(service.stats().acked_sequence >= last);  // ready means the backlog is applied
  CHECK(service_normal_form(service).size() == 100 * 300);
  auto stats = client.request(Subjects().admin_stats(), "{}", 2000);
  REQUIRE(stats.ok());
  CHECK(Json::parse(stats.value().data()).at("ready") == true);
  service.stop(true);
  CHECK(service.readiness().reason == "stopped");

  // Restarted on its snapshot, with nothing new in the stream: ready as soon as it started.
  KvidxService again(config);
  REQUIRE(again.start().ok());
  CHECK(again.stats().restored_sequence == last);
  CHECK(again.readiness().ready);

  // Core mode: ready once subscribed.
  ServiceConfig core = service_config_for(server, "core");
  core.mode = IngestMode::core;
  KvidxService core_service(core);
  REQUIRE(core_service.start().ok());
  CHECK(core_service.readiness().ready);
}

TEST_CASE(
    "service: replies over the server's max_payload are chunked for requesters that accept chunks, else a "
    "reply_too_large error") {
  NatsServer server(testing::NatsServerOptions::with_max_payload(4096));
  Connection client = connect_to(server, kClientName);
  REQUIRE(client.max_payload() == 4096);
  ServiceConfig config = service_config_for(server, "big");
  std::vector<RouterEvent> events;
  for (WorkerId w = 1; w <= 2000; ++w) events.push_back(testing::make_store_event(w, {1, 2}));
  std::set<testing::BlockKey> before;
  {
    KvidxService service(config);
    REQUIRE(service.start().ok());
    REQUIRE(service.ingest_local_events(events).ok());
    REQUIRE(service.indexer().flush() == IndexerStatus::ok);
    before = service_normal_form(service);
    REQUIRE(before.size() == 4000);

    // A plain request/reply (a router): the 2000-stream reply cannot be sent, so a clear error comes
    // back instead (before: the reply was dropped with a debug line and the request timed out).
    const std::string query = R"({"local_hashes":[1]})";
    for (const std::string& subject : {Subjects().query_scores(), Subjects().admin_workers()}) {
      auto plain = client.request(subject, subject == Subjects().query_scores() ? query : "{}", 5000);
      REQUIRE_MESSAGE(plain.ok(), subject << ": " << plain.error().message);
      const Json error = Json::parse(plain.value().data());
      REQUIRE_MESSAGE(error.contains("error"), error.dump());
      CHECK(error["error"]["code"] == "reply_too_large");
      const std::string message = error["error"]["message"].get<std::string>();
      CHECK(message.find("max_payload of 4096 bytes") != std::string::npos);
      CHECK(message.find("Kvidx-Chunked: 1") != std::string::npos);
    }
    // NOTE: counted right after the error reply is published, so the requester can be faster.
    CHECK(testing::wait_until(
        [&] { return metric_value(service.render_metrics(), "kvidx_replies_too_large_total") == 2.0; }, 2000ms));

    // A requester that accepts chunks gets the whole reply.
    auto scores = request_accepting_chunks(client, Subjects().query_scores(), query, 5000);
    REQUIRE_MESSAGE(scores.ok(), scores.error().message);
    const Json reply = Json::parse(scores.value());
    REQUIRE(reply["scores"].size() == 2000);
    CHECK(reply["scores"][1999] == Json::parse(R"({"worker_id":2000,"dp_rank":0,"score":1})"));
    auto workers = request_accepting_chunks(client, Subjects().admin_workers(), "{}", 5000);
    REQUIRE_MESSAGE(workers.ok(), workers.error().message);
    CHECK(Json::parse(workers.value())["streams"].size() == 2000);
    // A reply that fits stays one plain message for the same requester.
    auto small = request_accepting_chunks(client, Subjects().query_scores(), R"({"local_hashes":[99]})", 5000);
    REQUIRE(small.ok());
    CHECK(Json::parse(small.value())["scores"].empty());

    // The dump and the snapshot (2000 watermarks: more than one 4 KiB message) fit too.
    CHECK(normal_form(admin_dump_checked(client, 4096)) == before);
    auto written = service.snapshot_now();
    REQUIRE_MESSAGE(written.ok(), written.error().message);
    service.stop(false);
  }
  KvidxService fresh(config);
  auto started = fresh.start();
  REQUIRE_MESSAGE(started.ok(), started.error().message);
  CHECK(service_normal_form(fresh) == before);
  // The watermarks came back too: the same event again is a duplicate, not a new store.
  REQUIRE(fresh.ingest_local_events(std::span(events).subspan(4, 1)).ok());
  CHECK(fresh.stats().duplicates == 1);
}

}  // TEST_SUITE("integration")
