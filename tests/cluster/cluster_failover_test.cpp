// High availability on a real 3-node nats-server cluster (tests/support/nats_cluster.h) with the
// built `kvidx serve` as replicas: the events stream's leader killed mid-publish and restarted, a
// kvidx replica SIGKILLed under a score-query load, a replica started late. Replicas prove they agree
// with the index digest (libindexer/index_digest.h) at the same stream position. Every wait is a
// deadline with polling; the figures measured are reported with MESSAGE (README "Running on a
// cluster" quotes them).
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <thread>

#include "libbus/retrying_request.h"
#include "libcodec/query_codec.h"
#include "libindexer/index_digest.h"
#include "replay/event_log_writer.h"
#include "tests/cluster/replica_answers.h"
#include "tests/faults/fault_support.h"
#include "tests/support/nats_cluster.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsCluster;
using kvidx::testing::TempDir;

namespace {

bus::Connection connect_to_cluster(const NatsCluster& cluster, const std::string& name) {
  bus::ConnectionOptions o;
  o.url = cluster.urls();
  o.name = name;
  o.reconnect_wait_ms = 100;
  auto c = bus::Connection::connect(o);
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  return std::move(c).value();
}

// The offline reference: every event applied in order on one lane, kept for queries.
struct Reference {
  LaneIndexer index{1};
  std::vector<RouterEvent> dump;
  explicit Reference(const std::vector<const RouterEvent*>& events) {
    for (const RouterEvent* e : events) REQUIRE(index.enqueue_event(*e) == IndexerStatus::ok);
    auto d = index.dump_events();
    REQUIRE(d.has_value());
    dump = std::move(*d);
  }
};

std::string digest_total(const Json& stats) { return stats.at("digest").at("total").get<std::string>(); }

// Stats with the digest total once the replica has applied and acknowledged everything up to
// `sequence` (its digest position is then `sequence`: nothing more is published).
Json settled_stats(bus::Connection& conn, ServeProcess& serve, std::uint64_t sequence) {
  wait_acked(conn, serve, sequence);
  const auto stats = admin_stats(conn, 5000, R"({"digest":"total"})");
  REQUIRE(stats.has_value());
  return *stats;
}

// One replica's answer on kv.admin.replicas (kv.admin.stats goes to any one of them).
std::optional<Json> replica_stats(bus::Connection& conn, const std::string& replica) {
  for (const Json& answer : replica_answers(conn, std::chrono::milliseconds(300))) {
    if (answer.at("replica") == replica) return answer;
  }
  return std::nullopt;
}

// Waits until `replica` has applied and acknowledged the stream up to `sequence`; its last answer
// (with the digest total, at position `sequence` once nothing more is published).
Json replica_settled(bus::Connection& conn, ServeProcess& serve, const std::string& replica, std::uint64_t sequence,
                     std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = Clock::now() + limit;
  std::optional<Json> last;
  while (Clock::now() < deadline) {
    REQUIRE_MESSAGE(serve.running(), "kvidx serve exited: " << serve.log());
    last = replica_stats(conn, replica);
    if (last && last->at("acked_sequence").get<std::uint64_t>() >= sequence &&
        last->at("digest").at("position").get<std::uint64_t>() >= sequence) {
      return *last;
    }
  }
  FAIL("replica " << replica << " did not reach " << sequence << ": " << (last ? last->dump() : "no answer") << "\n"
                  << serve.log());
  return {};
}

}  // namespace

TEST_SUITE("cluster") {

TEST_CASE("cluster: the test cluster elects a JetStream meta leader and kvidx creates its streams with 3 replicas") {
  NatsCluster cluster;
  TempDir dir;
  bus::Connection conn = connect_to_cluster(cluster, "kvidx-cluster-test");
  CHECK(conn.known_servers() == 3);
  ServeProcess serve(cluster.urls(), dir, "a", {"--snapshot-interval", "0"});
  const Json stats = wait_ready(conn, serve);
  CHECK(stats.at("stream_replicas") == 3);  // automatic: 3 servers known
  CHECK(stats.at("known_servers") == 3);
  CHECK(cluster.wait_stream_leader("KV_EVENTS").has_value());
  CHECK(cluster.wait_stream_leader("KV_SNAPSHOTS").has_value());
  CHECK(serve.stop(SIGTERM) == 0);
  // An explicit count updates the existing stream, and says so.
  ServeProcess scaled(cluster.urls(), dir, "a", {"--snapshot-interval", "0", "--stream-replicas", "1"});
  CHECK(wait_ready(conn, scaled).at("stream_replicas") == 1);
  CHECK(scaled.stop(SIGTERM) == 0);
  CHECK(scaled.log().find("stream KV_EVENTS: replicas 3 -> 1 (--stream-replicas 1)") != std::string::npos);
  // Automatic again: the existing R1 stream is kept, with a warning naming the flag.
  ServeProcess kept(cluster.urls(), dir, "a", {"--snapshot-interval", "0"});
  CHECK(wait_ready(conn, kept).at("stream_replicas") == 1);
  CHECK(kept.stop(SIGTERM) == 0);
  CHECK(kept.log().find("stream KV_EVENTS has 1 replica(s), kept; with 3 NATS server(s) known the automatic count "
                        "is 3: run once with --stream-replicas 3") != std::string::npos);
}

TEST_CASE("cluster: the events stream's leader is killed mid-publish and restarted: nothing acknowledged is lost") {
  NatsCluster cluster;
  TempDir dir;
  bus::Connection conn = connect_to_cluster(cluster, "kvidx-cluster-test");
  ServeProcess serve(cluster.urls(), dir, "a", {"--lanes", "2", "--snapshot-interval", "500ms", "--fetch-batch", "50"});
  wait_ready(conn, serve);
  const auto leader = cluster.wait_stream_leader("KV_EVENTS");
  REQUIRE(leader.has_value());

  const testing::Histories histories = testing::branching_histories(6, 2, 50, 20);
  const auto events = testing::interleave(histories);
  bus::Connection pub = connect_to_cluster(cluster, "kvidx-cluster-publisher");
  auto js = bus::JetStream::create(pub);
  REQUIRE(js.ok());
  const bus::Subjects subjects;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  int retries = 0;
  std::size_t acknowledged = 0;
  Clock::time_point killed_at{};
  double publish_outage_s = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (i == events.size() / 3) {
      cluster.kill9(*leader);  // the stream leader, mid-publish
      killed_at = Clock::now();
    }
    if (i == 2 * events.size() / 3) cluster.restart(*leader);
    const int before = retries;
    publish_retrying(js.value(), subjects.events(events[i]->worker_id), encode_router_event(*events[i]), deadline,
                     &retries);
    ++acknowledged;  // NOTE: publish_retrying returns only once JetStream acknowledged the message
    if (retries > before && killed_at != Clock::time_point{}) {
      publish_outage_s = std::max(publish_outage_s, std::chrono::duration<double>(Clock::now() - killed_at).count());
    }
  }
  REQUIRE(acknowledged == events.size());
  REQUIRE(cluster.wait_healthy());
  const auto new_leader = cluster.wait_stream_leader("KV_EVENTS");
  CHECK(new_leader.has_value());

  // A retried publish whose first copy was stored after all is a second message with the same
  // event_id: kvidx skips it as a duplicate, so nothing is applied twice.
  const std::uint64_t last = stream_last_sequence(conn);
  CHECK(last >= events.size());
  const auto t0 = Clock::now();
  const Json stats = settled_stats(conn, serve, last);
  const double settle_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const Reference reference(events);
  CHECK(normal_form(admin_dump(conn)) == normal_form(reference.dump));
  CHECK(stats.at("events_applied") == events.size());
  CHECK(stats.at("duplicates") == last - events.size());
  CHECK(stats.at("gaps") == 0);
  CHECK(stats.at("dead_letters") == 0);
  CHECK(digest_total(stats) == digest_hex(digest_of(reference.dump).total));
  CHECK(stats.at("digest").at("position") == last);
  // The operator's check: `kvidx stats --events` on a log of what was acknowledged prints the
  // digest of its offline replay, equal to the live one.
  {
    EventLogWriter log(dir.file("acknowledged.jsonl"));
    REQUIRE(log.ok());
    for (const RouterEvent* e : events) log.write(*e);
    REQUIRE(log.close());
  }
  const auto offline =
      testing::run_command({testing::built_binary("kvidx"), "stats", "--events", dir.file("acknowledged.jsonl")});
  REQUIRE_MESSAGE(offline.exit_code == 0, offline.err);
  CHECK(Json::parse(offline.out).at("digest").at("total") == digest_total(stats));
  MESSAGE("leader n" << *leader << " killed after " << events.size() / 3 << " of " << events.size()
                     << " events; publishes retried " << retries << " time(s), publishing resumed " << publish_outage_s
                     << " s after the kill; new leader n" << new_leader.value_or(-1) << "; " << (last - events.size())
                     << " duplicate message(s); kvidx settled " << settle_s
                     << " s after the last publish; consumer resets " << stats.at("consumer_resets"));
}

TEST_CASE("cluster: a kvidx replica is SIGKILLed while another serves: score queries keep being answered") {
  NatsCluster cluster;
  TempDir dir;
  bus::Connection conn = connect_to_cluster(cluster, "kvidx-cluster-test");
  const std::vector<std::string> flags = {"--lanes", "2", "--snapshot-interval", "0"};
  ServeProcess a(cluster.urls(), dir, "a", flags);
  ServeProcess b(cluster.urls(), dir, "b", flags);
  replica_settled(conn, a, "a", 0);
  replica_settled(conn, b, "b", 0);

  const testing::Histories histories = testing::branching_histories(4, 2, 30, 21);
  const auto events = testing::interleave(histories);
  {
    auto js = bus::JetStream::create(conn);
    REQUIRE(js.ok());
    for (const RouterEvent* e : events) {
      REQUIRE(js.value().publish(bus::Subjects().events(e->worker_id), encode_router_event(*e)).ok());
    }
  }
  const std::uint64_t last = stream_last_sequence(conn);
  const Json stats_a = replica_settled(conn, a, "a", last);
  const Json stats_b = replica_settled(conn, b, "b", last);
  // Replicas agree: the same digest at the same stream position, and `kv.admin.replicas` lists both.
  CHECK(stats_a.at("digest").at("position") == last);
  CHECK(stats_b.at("digest").at("position") == last);
  CHECK(digest_total(stats_a) == digest_total(stats_b));
  const auto answers = replica_answers(conn, std::chrono::milliseconds(2000), 2);
  REQUIRE(answers.size() == 2);
  CHECK(answers[0].at("replica") != answers[1].at("replica"));
  CHECK(digest_total(answers[0]) == digest_total(answers[1]));

  const Reference reference(events);
  const std::vector<LocalBlockHash> query = {{1}, {2}, {3}, {4}, {100}, {1000}};
  const ScoreReply expected = make_score_reply(reference.index.find_matches(query, false));
  const std::string request = encode_score_request(ScoreRequest{query, false});

  // Queries back to back from one client (retrying like `kvidx score`), across the kill.
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::atomic<int> failed{0};
  std::atomic<int> wrong{0};
  std::atomic<int> retried{0};
  std::atomic<std::int64_t> slowest_us{0};
  std::thread client([&] {
    bus::Connection qc = connect_to_cluster(cluster, "kvidx-cluster-router");
    bus::RetryPolicy policy;
    policy.retries = 2;
    policy.timeout_ms = 3000;
    while (!stop.load()) {
      const auto t0 = Clock::now();
      auto reply = bus::request_retrying(qc, bus::Subjects().query_scores(), request, policy);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
      if (us > slowest_us.load()) slowest_us = us;
      if (!reply.ok()) {
        ++failed;
        continue;
      }
      if (reply.value().attempts > 1) ++retried;
      auto decoded = decode_score_reply(reply.value().body);
      if (!decoded.ok() || decoded.value().scores != expected.scores ||
          decoded.value().frequencies != expected.frequencies) {
        ++wrong;
      }
      ++answered;
    }
  });
  REQUIRE(testing::wait_until([&] { return answered.load() >= 50; }, std::chrono::seconds(10)));
  const int before_kill = answered.load();
  CHECK(a.stop(SIGKILL) == 128 + SIGKILL);
  const auto killed_at = Clock::now();
  // The survivor keeps answering: queries go on for 1.5 s after the kill (and at least 50 answers).
  std::this_thread::sleep_until(killed_at + std::chrono::milliseconds(1500));
  CHECK(testing::wait_until([&] { return answered.load() >= before_kill + 50; }, std::chrono::seconds(15)));
  const double after_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  stop = true;
  client.join();
  CHECK(failed.load() == 0);
  CHECK(wrong.load() == 0);
  CHECK(b.running());
  const auto survivors = replica_answers(conn, std::chrono::milliseconds(500));
  REQUIRE(survivors.size() == 1);
  CHECK(survivors[0].at("replica") == "b");
  MESSAGE(answered.load() << " score queries (" << before_kill << " before the SIGKILL, the rest over " << after_s
                          << " s after): " << failed.load() << " failed, " << retried.load()
                          << " answered only after a retry, slowest " << slowest_us.load() / 1000.0 << " ms");
}

TEST_CASE("cluster: a replica started late bootstraps from the newest snapshot plus the stream and converges") {
  NatsCluster cluster;
  TempDir dir;
  bus::Connection conn = connect_to_cluster(cluster, "kvidx-cluster-test");
  ServeProcess a(cluster.urls(), dir, "a", {"--lanes", "2", "--snapshot-interval", "200ms"});
  wait_ready(conn, a);
  const testing::Histories histories = testing::branching_histories(4, 2, 40, 22);
  const auto events = testing::interleave(histories);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  const std::size_t half = events.size() / 2;
  for (std::size_t i = 0; i < half; ++i) {
    REQUIRE(js.value().publish(bus::Subjects().events(events[i]->worker_id), encode_router_event(*events[i])).ok());
  }
  const std::uint64_t first_half = stream_last_sequence(conn);
  const int written = wait_acked(conn, a, first_half).at("snapshots_written").get<int>();
  // A snapshot covering the first half: the second one started after the ack (every 200 ms).
  REQUIRE(testing::wait_until(
      [&] {
        const auto s = admin_stats(conn, 1000);
        return s && s->at("snapshots_written").get<int>() >= written + 2;
      },
      std::chrono::seconds(15), std::chrono::milliseconds(50)));
  for (std::size_t i = half; i < events.size(); ++i) {
    REQUIRE(js.value().publish(bus::Subjects().events(events[i]->worker_id), encode_router_event(*events[i])).ok());
  }
  const std::uint64_t last = stream_last_sequence(conn);

  // The late replica has no snapshot of its own: it takes a's newest and reads the stream after it.
  ServeProcess late(cluster.urls(), dir, "late", {"--lanes", "2", "--snapshot-interval", "0"});
  std::optional<Json> late_stats;
  REQUIRE(testing::wait_until(
      [&] {
        for (const Json& answer : replica_answers(conn, std::chrono::milliseconds(300))) {
          if (answer.at("replica") == "late") late_stats = answer;
        }
        return late_stats.has_value();
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50)));
  CHECK(late_stats->at("restored_from") == "a");
  CHECK(late_stats->at("restored_sequence").get<std::uint64_t>() >= first_half);
  CHECK(late_stats->at("restored_sequence").get<std::uint64_t>() <= last);

  // Converged: both at the stream's end, the same digest there, the offline reference's.
  const Reference reference(events);
  std::vector<Json> answers;
  REQUIRE(testing::wait_until(
      [&] {
        answers = replica_answers(conn, std::chrono::milliseconds(300));
        if (answers.size() != 2) return false;
        for (const Json& s : answers) {
          if (s.at("digest").at("position") != last) return false;
        }
        return true;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50)));
  CHECK(digest_total(answers[0]) == digest_total(answers[1]));
  CHECK(digest_total(answers[0]) == digest_hex(digest_of(reference.dump).total));
  // The CLI's view of the same: every replica, one position, digests agree.
  const auto all = testing::run_command(
      {testing::built_binary("kvidx"), "stats", "--nats", cluster.urls(), "--all", "--window", "0.5"});
  INFO(all.err);
  REQUIRE(all.exit_code == 0);
  const Json listed = Json::parse(all.out);
  CHECK(listed.at("replicas") == 2);
  CHECK(listed.at("same_position") == true);
  CHECK(listed.at("agree") == true);
  CHECK(late.stop(SIGTERM) == 0);
  CHECK(a.stop(SIGTERM) == 0);
}

}  // TEST_SUITE("cluster")
