// End-to-end tests of KvidxService against a real nats-server: ingest (JetStream and core),
// request/reply queries, dead letters, snapshots and restart, replicas.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/service.h"
#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"
#include "tests/support/event_histories.h"
#include "tests/support/nats_client.h"
#include "tests/support/nats_server.h"
#include "tests/support/service_configs.h"
#include "tests/support/thread_names.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::bus;
using kvidx::testing::NatsServer;
using Json = nlohmann::json;

using kvidx::testing::connect_to;
using kvidx::testing::service_config_for;

namespace {

constexpr WorkerId kWorkers = 64;
constexpr DpRank kRanks = 2;

using testing::BlockKey;
using testing::normal_form;

// Removals one time in four.
std::map<WorkerWithDpRank, std::vector<RouterEvent>> all_histories(int n) {
  return testing::branching_histories(kWorkers, kRanks, n, 0, 4);
}

std::set<BlockKey> offline_normal_form(const std::map<WorkerWithDpRank, std::vector<RouterEvent>>& histories) {
  LaneIndexer offline(1);
  for (const auto& [stream, events] : histories) {
    for (const auto& e : events) REQUIRE(offline.enqueue_event(e) == IndexerStatus::ok);
  }
  auto dump = offline.dump_events();
  REQUIRE(dump.has_value());
  return normal_form(*dump);
}

// Publishes every stream's history from `threads` threads at once (streams interleaved), some
// events as 2-event JSON array batches. Returns the number of messages.
std::size_t publish_concurrently(const NatsServer& server,
                                 const std::map<WorkerWithDpRank, std::vector<RouterEvent>>& histories, bool jetstream,
                                 int threads = 4) {
  std::vector<const std::pair<const WorkerWithDpRank, std::vector<RouterEvent>>*> streams;
  for (const auto& entry : histories) streams.push_back(&entry);
  std::atomic<std::size_t> messages{0};
  std::vector<std::thread> pool;
  Subjects subjects;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Connection conn = connect_to(server);
      std::optional<JetStream> js;
      if (jetstream) js.emplace(std::move(JetStream::create(conn)).value());
      std::vector<std::size_t> pos(streams.size(), 0);
      bool any = true;
      while (any) {
        any = false;
        for (std::size_t i = static_cast<std::size_t>(t); i < streams.size(); i += static_cast<std::size_t>(threads)) {
          const auto& [stream, events] = *streams[i];
          if (pos[i] >= events.size()) continue;
          any = true;
          const std::size_t take = (pos[i] % 5 == 1 && pos[i] + 1 < events.size()) ? 2 : 1;
          const std::string body = take == 2 ? encode_router_events(std::span(events).subspan(pos[i], 2))
                                             : encode_router_event(events[pos[i]]);
          pos[i] += take;
          const std::string subject = subjects.events(stream.worker_id);
          if (jetstream)
            REQUIRE(js->publish_async(subject, body).ok());
          else
            REQUIRE(conn.publish(subject, body).ok());
          ++messages;
        }
      }
      if (jetstream)
        REQUIRE(js->publish_async_complete(30000).ok());
      else
        REQUIRE(conn.flush().ok());
    });
  }
  for (auto& th : pool) th.join();
  return messages;
}

std::uint64_t stream_last_sequence(const NatsServer& server) {
  Connection conn = connect_to(server);
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  auto state = js.value().stream_state("KV_EVENTS");
  REQUIRE(state.ok());
  return state.value().last_sequence;
}

std::set<BlockKey> service_normal_form(KvidxService& service) {
  auto dump = service.indexer().dump_events();
  REQUIRE(dump.has_value());
  return normal_form(*dump);
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("service: 64 workers x 2 ranks published concurrently over jetstream equal an offline sequential apply") {
  NatsServer server;
  const auto histories = all_histories(40);
  KvidxService service(service_config_for(server, "main", 4));
  REQUIRE(service.start().ok());
  const std::size_t messages = publish_concurrently(server, histories, /*jetstream=*/true);
  const std::uint64_t last = stream_last_sequence(server);
  CHECK(last == messages);
  REQUIRE(service.wait_for_acked_sequence(last, std::chrono::seconds(60)));
  const auto stats = service.stats();
  CHECK(stats.events_applied == kWorkers * kRanks * 40);
  CHECK(stats.gaps == 0);
  CHECK(stats.dead_letters == 0);
  CHECK(service_normal_form(service) == offline_normal_form(histories));
  const std::string metrics = service.render_metrics();
  CHECK(metrics.find("kvidx_events_total{type=\"stored\",result=\"applied\"}") != std::string::npos);
  CHECK(metrics.find("kvidx_tree_blocks") != std::string::npos);
}

TEST_CASE("service: core mode ingest of 64 workers x 2 ranks equals an offline sequential apply") {
  NatsServer server;
  const auto histories = all_histories(20);
  KvidxService service(service_config_for(server, "core", 4, IngestMode::core));
  REQUIRE(service.start().ok());
  publish_concurrently(server, histories, /*jetstream=*/false);
  const std::uint64_t expected = kWorkers * kRanks * 20;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (service.stats().events_applied < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(service.stats().events_applied == expected);
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  CHECK(service.stats().core_dropped == 0);
  CHECK(service_normal_form(service) == offline_normal_form(histories));
  // What top -H shows: the subscription's delivery thread named itself on its first message.
  const auto names = testing::thread_names();
  CHECK(names.count("kvidx-core-in") == 1);
}

TEST_CASE("service: score queries over request reply match in-process find_matches") {
  NatsServer server;
  const auto histories = all_histories(30);
  KvidxService service(service_config_for(server, "q", 4));
  REQUIRE(service.start().ok());
  publish_concurrently(server, histories, true);
  REQUIRE(service.wait_for_acked_sequence(stream_last_sequence(server), std::chrono::seconds(60)));
  Connection client = connect_to(server);
  Subjects subjects;
  std::mt19937_64 rng(7);
  int nonempty = 0;
  for (int q = 0; q < 50; ++q) {
    std::vector<LocalBlockHash> query = {{1}, {2}, {3}, {4}, {100 + rng() % 16}};
    for (int k = 0; k < 3; ++k) query.push_back({1000 + rng() % 64});
    auto reply = client.request(subjects.query_scores(), encode_score_request({query, false}), 2000);
    REQUIRE_MESSAGE(reply.ok(), reply.error().message);
    auto decoded = decode_score_reply(reply.value().data());
    REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
    const ScoreReply expected = make_score_reply(service.indexer().find_matches(query));
    CHECK(decoded.value() == expected);
    if (!expected.scores.empty()) ++nonempty;
  }
  CHECK(nonempty == 50);
  // Bad request: an error reply, not a crash.
  auto bad = client.request(subjects.query_scores(), R"({"local_hashes":"nope"})", 2000);
  REQUIRE(bad.ok());
  const auto error = decode_error_reply(bad.value().data());
  REQUIRE(error.has_value());
  CHECK(error->code == "bad_request");
  // Stats and workers.
  auto stats = client.request(subjects.admin_stats(), "{}", 2000);
  REQUIRE(stats.ok());
  const Json s = Json::parse(stats.value().data());
  CHECK(s.at("workers") == kWorkers);
  CHECK(s.at("streams") == kWorkers * kRanks);
  auto workers = client.request(subjects.admin_workers(), "{}", 2000);
  REQUIRE(workers.ok());
  CHECK(Json::parse(workers.value().data()).at("workers").size() == kWorkers);
  // Remove one rank, then a whole worker.
  auto removed = client.request(subjects.admin_remove_worker(), encode_remove_worker_request({5, 1}), 5000);
  REQUIRE(removed.ok());
  CHECK(Json::parse(removed.value().data()).at("ok") == true);
  REQUIRE(client.request(subjects.admin_remove_worker(), encode_remove_worker_request({6, std::nullopt}), 5000).ok());
  for (const auto& key : service_normal_form(service)) {
    CHECK_FALSE((std::get<0>(key) == 5 && std::get<1>(key) == 1));
    CHECK(std::get<0>(key) != 6);
  }
}

TEST_CASE("service: dump over request reply arrives in chunks with an end marker") {
  NatsServer server;
  const auto histories = all_histories(10);
  KvidxService service(service_config_for(server, "d", 4));
  REQUIRE(service.start().ok());
  publish_concurrently(server, histories, true);
  REQUIRE(service.wait_for_acked_sequence(stream_last_sequence(server), std::chrono::seconds(60)));
  Connection client = connect_to(server);
  const std::string inbox = client.new_inbox();
  auto sub = client.subscribe_sync(inbox);
  REQUIRE(sub.ok());
  REQUIRE(sub.value().set_unlimited_pending().ok());
  auto request = Message::create(Subjects().admin_dump(), "{}", inbox);
  REQUIRE(request.ok());
  REQUIRE(client.publish(request.value()).ok());
  std::vector<RouterEvent> events;
  int chunks = 0;
  Json end;
  while (true) {
    auto msg = sub.value().next(5000);
    REQUIRE_MESSAGE(msg.ok(), msg.error().message);
    CHECK(static_cast<std::int64_t>(msg.value().data().size()) <= client.max_payload());
    if (msg.value().header("Kvidx-Dump") == std::string("end")) {
      end = Json::parse(msg.value().data());
      break;
    }
    ++chunks;
    std::string_view rest = msg.value().data();
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      auto e = decode_router_event(rest.substr(0, nl));
      REQUIRE(e.ok());
      events.push_back(std::move(e).value());
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  CHECK(end.at("end") == true);
  CHECK(end.at("chunks") == chunks);
  CHECK(end.at("events") == events.size());
  CHECK(normal_form(events) == service_normal_form(service));
}

TEST_CASE("service: malformed and mismatched messages are dead-lettered, counted and never touch the tree") {
  NatsServer server;
  KvidxService service(service_config_for(server, "dl", 4));
  REQUIRE(service.start().ok());
  Connection conn = connect_to(server);
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> dead;  // reason, original subject
  auto sub = conn.subscribe("kv.deadletter", [&](Message m) {
    std::lock_guard lock(mutex);
    dead.emplace_back(m.header(kDeadLetterReasonHeader).value_or(""), m.header(kDeadLetterSubjectHeader).value_or(""));
  });
  REQUIRE(sub.ok());
  REQUIRE(conn.flush().ok());
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  REQUIRE(js.value().publish("kv.events.3", "{not json").ok());
  REQUIRE(js.value().publish("kv.events.3", encode_router_event(testing::make_store_event(4, {1, 2}))).ok());
  REQUIRE(js.value().publish("kv.events.x", encode_router_event(testing::make_store_event(4, {1, 2}))).ok());
  REQUIRE(js.value().publish("kv.events.3", R"({"worker_id":3,"event":{"event_id":"zero","data":"cleared"}})").ok());
  auto good = js.value().publish("kv.events.3", encode_router_event(testing::make_store_event(3, {7, 8})));
  REQUIRE(good.ok());
  REQUIRE(service.wait_for_acked_sequence(good.value().sequence, std::chrono::seconds(10)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    std::lock_guard lock(mutex);
    if (dead.size() == 4) break;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::lock_guard lock(mutex);
  REQUIRE(dead.size() == 4);
  CHECK(dead[0].first.find("decode: invalid JSON") == 0);
  CHECK(dead[0].second == "kv.events.3");
  CHECK(dead[1].first.find("does not match payload worker_id 4") != std::string::npos);
  CHECK(dead[2].first.find("subject:") == 0);
  CHECK(dead[3].first.find("event.event_id") != std::string::npos);
  CHECK(service.stats().dead_letters == 4);
  const auto form = service_normal_form(service);
  REQUIRE(form.size() == 2);
  for (const auto& key : form) CHECK(std::get<0>(key) == 3);
  CHECK(service.render_metrics().find("kvidx_dead_letters_total 4") != std::string::npos);
}

TEST_CASE("service: crash without final snapshot then restart loses nothing and matches a replica that never died") {
  NatsServer server;
  const auto histories = all_histories(30);
  // Split each stream's history in three parts published at different times.
  std::map<WorkerWithDpRank, std::vector<RouterEvent>> part[3];
  for (const auto& [stream, events] : histories) {
    for (std::size_t i = 0; i < events.size(); ++i) part[i * 3 / events.size()][stream].push_back(events[i]);
  }
  KvidxService replica(service_config_for(server, "replica", 4));
  REQUIRE(replica.start().ok());
  {
    auto victim = std::make_unique<KvidxService>(service_config_for(server, "victim", 4));
    REQUIRE(victim->start().ok());
    publish_concurrently(server, part[0], true);
    REQUIRE(victim->wait_for_acked_sequence(stream_last_sequence(server), std::chrono::seconds(60)));
    REQUIRE(victim->snapshot_now().ok());
    publish_concurrently(server, part[1], true);
    REQUIRE(victim->wait_for_acked_sequence(stream_last_sequence(server), std::chrono::seconds(60)));
    victim.reset();  // abrupt: no final snapshot; part[1] is only in the stream
  }
  publish_concurrently(server, part[2], true);  // while the victim is down
  KvidxService restarted(service_config_for(server, "victim", 4));
  {
    auto started = restarted.start();
    REQUIRE_MESSAGE(started.ok(), started.error().message);
  }
  CHECK(restarted.stats().restored_sequence > 0);
  const std::uint64_t last = stream_last_sequence(server);
  REQUIRE(restarted.wait_for_acked_sequence(last, std::chrono::seconds(60)));
  REQUIRE(replica.wait_for_acked_sequence(last, std::chrono::seconds(60)));
  const auto expected = offline_normal_form(histories);
  CHECK(service_normal_form(restarted) == expected);
  CHECK(service_normal_form(replica) == expected);
  // Two replicas on one stream answer identically.
  for (std::uint64_t branch = 100; branch < 116; ++branch) {
    const std::vector<LocalBlockHash> query = {{1}, {2}, {3}, {4}, {branch}};
    CHECK(make_score_reply(restarted.indexer().find_matches(query)) ==
          make_score_reply(replica.indexer().find_matches(query)));
  }
}

TEST_CASE("service: graceful stop writes a final snapshot that the next start restores") {
  NatsServer server;
  const auto histories = all_histories(10);
  {
    KvidxService first(service_config_for(server, "g", 4));
    REQUIRE(first.start().ok());
    publish_concurrently(server, histories, true);
    REQUIRE(first.wait_for_acked_sequence(stream_last_sequence(server), std::chrono::seconds(60)));
    first.stop(true);
    CHECK(first.stats().snapshots_written == 1);
  }
  KvidxService second(service_config_for(server, "g", 4));
  {
    auto started = second.start();
    REQUIRE_MESSAGE(started.ok(), started.error().message);
  }
  CHECK(second.stats().restored_sequence == stream_last_sequence(server));
  CHECK(second.stats().messages == 0);  // nothing replayed from the stream
  CHECK(service_normal_form(second) == offline_normal_form(histories));
}

TEST_CASE("service: remove_worker reaches every replica, not one member of the queue group") {
  NatsServer server;
  const auto histories = all_histories(10);
  KvidxService a(service_config_for(server, "ra", 4));
  KvidxService b(service_config_for(server, "rb", 4));
  REQUIRE(a.start().ok());
  REQUIRE(b.start().ok());
  publish_concurrently(server, histories, true);
  const std::uint64_t last = stream_last_sequence(server);
  REQUIRE(a.wait_for_acked_sequence(last, std::chrono::seconds(60)));
  REQUIRE(b.wait_for_acked_sequence(last, std::chrono::seconds(60)));
  Connection client = connect_to(server);
  Subjects subjects;
  // Several requests, so a queue group would have split them between the replicas.
  for (WorkerId w = 5; w <= 8; ++w) {
    auto reply = client.request(subjects.admin_remove_worker(), encode_remove_worker_request({w, std::nullopt}), 5000);
    REQUIRE(reply.ok());
    CHECK(Json::parse(reply.value().data()).at("ok") == true);
  }
  auto rank = client.request(subjects.admin_remove_worker(), encode_remove_worker_request({9, 1}), 5000);
  REQUIRE(rank.ok());
  // The requester has the first reply; the other replica may still be applying: poll its view.
  auto removed_everywhere = [&](KvidxService& service) {
    for (int attempt = 0; attempt < 200; ++attempt) {
      bool clean = true;
      for (const auto& key : service_normal_form(service)) {
        const WorkerId w = std::get<0>(key);
        if ((w >= 5 && w <= 8) || (w == 9 && std::get<1>(key) == 1)) clean = false;
      }
      if (clean) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  };
  CHECK(removed_everywhere(a));
  CHECK(removed_everywhere(b));
  CHECK(service_normal_form(a) == service_normal_form(b));
  // Stats still go to one replica only (queue group): one reply arrives.
  auto stats = client.request(subjects.admin_stats(), "{}", 2000);
  REQUIRE(stats.ok());
}

TEST_CASE(
    "service: lane queue depth is exported per lane, and its lanes and JetStream ingest stages are named threads") {
  NatsServer server;
  ServiceConfig c = service_config_for(server, "m", 4);
  c.lanes = 3;
  KvidxService service(c);
  REQUIRE(service.start().ok());
  const std::string text = service.render_metrics();
  for (int lane = 0; lane < 3; ++lane) {
    CHECK(text.find("kvidx_lane_queue_depth{lane=\"" + std::to_string(lane) + "\"} 0") != std::string::npos);
  }
  // What top -H shows. NOTE: each thread names itself as it starts, which may come just after
  // start() returns.
  const std::set<std::string> expected{"kvidx-lane-0", "kvidx-lane-1",   "kvidx-lane-2",
                                       "kvidx-fetch",  "kvidx-dispatch", "kvidx-ack"};
  const bool named = testing::wait_until([&] {
    const auto names = testing::thread_names();
    return std::includes(names.begin(), names.end(), expected.begin(), expected.end());
  });
  CHECK(named);
}

TEST_CASE("service: stream retention is applied to the events stream, and trimmed history is reported at start") {
  NatsServer server;
  const auto histories = all_histories(4);
  {
    // Retention by age: the server discards what is older than max_age.
    ServiceConfig c = service_config_for(server, "ret", 4);
    c.stream_max_age = std::chrono::milliseconds(1500);
    KvidxService service(c);
    REQUIRE(service.start().ok());
    publish_concurrently(server, histories, true);
    REQUIRE(service.wait_for_acked_sequence(stream_last_sequence(server), std::chrono::seconds(60)));
    CHECK(service.stats().history_trimmed == 0);
    Connection conn = connect_to(server);
    auto js = JetStream::create(conn);
    REQUIRE(js.ok());
    std::uint64_t left = 1;
    for (int attempt = 0; attempt < 100 && left != 0; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = js.value().stream_state("KV_EVENTS").value().messages;
    }
    CHECK(left == 0);
    service.stop(false);
  }
  // A replica with no snapshot now starts after a trimmed history and says how much it missed.
  ServiceConfig c = service_config_for(server, "late", 4);
  KvidxService late(c);  // no retention flags: the stream is updated back to unlimited
  REQUIRE(late.start().ok());
  CHECK(late.stats().history_trimmed == stream_last_sequence(server));
  const std::uint64_t before = stream_last_sequence(server);
  publish_concurrently(server, histories, true);
  REQUIRE(late.wait_for_acked_sequence(stream_last_sequence(server), std::chrono::seconds(60)));
  CHECK(stream_last_sequence(server) > before);
  Connection conn = connect_to(server);
  auto js = JetStream::create(conn);
  REQUIRE(js.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  CHECK(js.value().stream_state("KV_EVENTS").value().messages == stream_last_sequence(server) - before);
}

}  // TEST_SUITE("integration")
