// Shards (libbus/shard_spec.h) on a real 3-node nats-server cluster whose config routes events
// with NATS's own subject mapping ("kv.events.*" -> "kv.events.{{partition(3,1)}}.{{wildcard(1)}}"):
// 3 shards x 2 replicas of the built `kvidx serve --shard I/3` and a merging front (`--front 3`)
// answer a Mooncake-derived workload exactly as one unsharded kvidx on the same stream, also with
// a shard replica SIGKILLed under queries. The latencies of the front, of a client merging the
// shards' replies itself and of the unsharded kvidx are reported with MESSAGE (README "Shards").
// A second case, on one server, checks that no shard or unsharded instance restores another's
// snapshot, and the flags' errors.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "libbus/retrying_request.h"
#include "libbus/shard_scatter.h"
#include "libbus/shard_spec.h"
#include "libcodec/query_codec.h"
#include "replay/mooncake_workload.h"
#include "tests/cluster/replica_answers.h"
#include "tests/faults/fault_support.h"
#include "tests/support/http_probe.h"
#include "tests/support/nats_cluster.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsCluster;
using kvidx::testing::TempDir;

namespace {

constexpr std::uint32_t kShards = 3;

bus::Connection connect_to_urls(const std::string& urls, const std::string& name) {
  bus::ConnectionOptions o;
  o.url = urls;
  o.name = name;
  o.reconnect_wait_ms = 100;
  o.send_asap = true;  // as a router would: the latencies measured are not nats.c's flusher's
  auto c = bus::Connection::connect(o);
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  return std::move(c).value();
}

// The Mooncake conversation trace through simulated LRU workers (replay/mooncake_workload.h): the
// events in publish order (event ids counted per stream) and the routed requests' hashes as queries.
struct Workload {
  std::vector<RouterEvent> events;
  std::vector<std::vector<LocalBlockHash>> queries;
};

Workload mooncake_workload(std::size_t requests, std::size_t max_queries) {
  std::vector<MooncakeRequest> trace;
  std::string error;
  REQUIRE_MESSAGE(
      load_mooncake_trace(std::string(KVIDX_SOURCE_DIR) + "/tests/data/traces/mooncake_conversation_trace.jsonl", trace,
                          error),
      error);
  if (trace.size() > requests) trace.resize(requests);
  WorkloadOptions options;
  options.workers = 12;
  options.dp_ranks = 2;
  options.capacity_blocks = 96;  // small caches: plenty of evictions (Removed events)
  Workload w;
  std::map<WorkerWithDpRank, std::uint64_t> next_id;
  std::vector<std::vector<LocalBlockHash>> all_queries;
  simulate_workload(trace, options,
                    WorkloadSink{[&](RouterEvent&& e) {
                                   e.event.event_id = next_id[e.stream()]++;
                                   // Workers 4k+3 offload: their blocks live on host_pinned, so replies
                                   // carry tier_scores and combined_scores from one shard's workers.
                                   if (e.worker_id % 4 == 3) e.storage_tier = StorageTier::host_pinned;
                                   w.events.push_back(std::move(e));
                                 },
                                 [&](const RoutedRequest& r) { all_queries.push_back(r.local_hashes); }});
  const std::size_t step = std::max<std::size_t>(1, all_queries.size() / max_queries);
  for (std::size_t i = 0; i < all_queries.size(); i += step) w.queries.push_back(all_queries[i]);
  w.queries.push_back({LocalBlockHash{1234567}});  // scores nothing
  return w;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(p * static_cast<double>(values.size())))];
}

std::string latency_line(const char* what, const std::vector<double>& us) {
  return fmt::format("{}: p50 {:.0f} us, p99 {:.0f} us ({} queries)", what, percentile(us, 0.5), percentile(us, 0.99),
                     us.size());
}

}  // namespace

TEST_SUITE("cluster") {

TEST_CASE("shards: 3 shards x 2 replicas and a front answer a Mooncake workload exactly like one unsharded kvidx") {
  NatsCluster cluster(3, bus::shard_mapping_config("kv", kShards));
  TempDir dir;
  bus::Connection conn = connect_to_urls(cluster.urls(), "kvidx-shards-test");

  std::vector<std::unique_ptr<ServeProcess>> replicas;  // shard I replica r: index 2 * I + r
  std::vector<std::string> names;
  for (std::uint32_t shard = 0; shard < kShards; ++shard) {
    for (const char* r : {"a", "b"}) {
      names.push_back(fmt::format("s{}{}", shard, r));
      replicas.push_back(
          std::make_unique<ServeProcess>(cluster.urls(), dir, names.back(),
                                         std::vector<std::string>{"--shard", fmt::format("{}/{}", shard, kShards),
                                                                  "--lanes", "1", "--snapshot-interval", "0"}));
    }
  }
  const int front_metrics = testing::find_free_port();
  ServeProcess front(cluster.urls(), dir, "front",
                     {"--nats", cluster.urls(), "--front", std::to_string(kShards), "--shard-timeout", "3s",
                      "--metrics", "127.0.0.1:" + std::to_string(front_metrics)},
                     /*default_flags=*/false);
  std::vector<Json> started;
  if (!testing::wait_until(
          [&] {
            started = replica_answers(conn, std::chrono::milliseconds(500), 6);
            return started.size() == 6;
          },
          std::chrono::seconds(30), std::chrono::milliseconds(100))) {
    std::string missing;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const bool answered =
          std::any_of(started.begin(), started.end(), [&](const Json& a) { return a.at("replica") == names[i]; });
      if (!answered && !replicas[i]->running()) missing += " (exited: " + std::to_string(replicas[i]->stop()) + ")";
      if (!answered) missing += "\n--- " + names[i] + ":\n" + replicas[i]->log();
    }
    FAIL("not every shard replica answers kv.admin.replicas:" << missing);
  }

  const Workload workload = mooncake_workload(400, 120);
  {
    auto js = bus::JetStream::create(conn);
    REQUIRE(js.ok());
    const bus::Subjects subjects;
    for (const RouterEvent& e : workload.events) {
      REQUIRE(js.value().publish_async(subjects.events(e.worker_id), encode_router_event(e)).ok());
    }
    REQUIRE(js.value().publish_async_complete(30000).ok());
  }
  const std::uint64_t last = stream_last_sequence(conn);
  REQUIRE(last == workload.events.size());

  // The server routed each worker where shard_of_worker says (kvidx's check of the same function).
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  std::map<WorkerId, bool> workers;
  for (const RouterEvent& e : workload.events) workers[e.worker_id] = true;
  std::vector<std::size_t> workers_per_shard(kShards, 0);
  for (const auto& [worker, _] : workers) {
    const std::uint32_t shard = bus::shard_of_worker(worker, kShards);
    ++workers_per_shard[shard];
    CHECK(js.value().get_last_message("KV_EVENTS", fmt::format("kv.events.{}.{}", shard, worker)).ok());
  }
  for (std::uint32_t shard = 0; shard < kShards; ++shard) CHECK(workers_per_shard[shard] > 0);

  // Every replica applied its shard's part: up to the last message of its filter, no dead letters,
  // and the replicas of a shard agree (digest at the same position).
  std::vector<std::uint64_t> shard_end(kShards, 0);
  for (std::uint32_t shard = 0; shard < kShards; ++shard) {
    auto m = js.value().get_last_message("KV_EVENTS", fmt::format("kv.events.{}.*", shard));
    REQUIRE(m.ok());
    shard_end[shard] = m.value().stored_sequence();
  }
  std::vector<Json> answers;
  REQUIRE_MESSAGE(
      testing::wait_until(
          [&] {
            answers = replica_answers(conn, std::chrono::milliseconds(500), 6);
            if (answers.size() != 6) return false;
            for (const Json& a : answers) {
              const auto shard = bus::parse_shard_spec(a.at("shard").get<std::string>());
              if (!shard.ok() || a.at("acked_sequence").get<std::uint64_t>() < shard_end[shard.value().index])
                return false;
            }
            return true;
          },
          std::chrono::seconds(60), std::chrono::milliseconds(100)),
      "replicas did not catch up: " << Json(answers).dump());
  std::map<std::string, std::string> digest_of_shard;
  std::uint64_t shard_streams = 0;
  for (const Json& a : answers) {
    CHECK(a.at("dead_letters") == 0);
    const std::string shard = a.at("shard").get<std::string>();
    const std::string total = a.at("digest").at("total").get<std::string>();
    if (auto it = digest_of_shard.find(shard); it != digest_of_shard.end()) {
      CHECK(it->second == total);  // the shard's two replicas agree
    } else {
      digest_of_shard[shard] = total;
      shard_streams += a.at("streams").get<std::uint64_t>();
    }
  }
  CHECK(digest_of_shard.size() == kShards);
  // A shard holds only its own workers (kv.shard.I.admin.workers).
  for (std::uint32_t shard = 0; shard < kShards; ++shard) {
    auto reply = conn.request(fmt::format("kv.shard.{}.admin.workers", shard), "{}", 5000);
    REQUIRE(reply.ok());
    auto listed = decode_workers_reply(reply.value().data());
    REQUIRE(listed.ok());
    CHECK(!listed.value().workers.empty());
    for (const WorkerId w : listed.value().workers) CHECK(bus::shard_of_worker(w, kShards) == shard);
  }

  // Through the front (kv.query.scores, as routers and `kvidx score` ask), and merged by the client.
  bus::RetryPolicy policy;
  policy.retries = 2;
  policy.timeout_ms = 3000;
  auto scatter =
      bus::ShardScatter::start(conn, bus::Subjects(), {kShards, std::chrono::milliseconds(3000), 2, nullptr});
  REQUIRE(scatter.ok());
  std::vector<std::string> requests;
  std::vector<std::string> front_replies;
  std::vector<double> front_us;
  std::vector<double> client_us;
  std::size_t with_tiers = 0;
  for (const auto& q : workload.queries) {
    requests.push_back(encode_score_request(ScoreRequest{q, false}));
    auto t0 = Clock::now();
    auto reply = bus::request_retrying(conn, bus::Subjects().query_scores(), requests.back(), policy);
    front_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    REQUIRE_MESSAGE(reply.ok(), reply.error().message);
    REQUIRE_MESSAGE(decode_score_reply(reply.value().body).ok(), reply.value().body);
    front_replies.push_back(reply.value().body);
    if (reply.value().body.find("tier_scores") != std::string::npos) ++with_tiers;
    t0 = Clock::now();
    auto merged = scatter.value()->query_sync(requests.back());
    client_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    REQUIRE_MESSAGE(merged.ok(), merged.error().message);
    CHECK(merged.value() == front_replies.back());
  }
  CHECK(with_tiers > 0);

  // One replica of shard 1 SIGKILLed while a router queries the front back to back: every answer
  // stays exact (the front asks that shard again when the dead replica held its request).
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::atomic<int> failed{0};
  std::atomic<int> wrong{0};
  std::thread router([&] {
    bus::Connection rc = connect_to_urls(cluster.urls(), "kvidx-shards-router");
    for (std::size_t i = 0; !stop.load(); i = (i + 1) % requests.size()) {
      auto reply = bus::request_retrying(rc, bus::Subjects().query_scores(), requests[i], policy);
      if (!reply.ok()) {
        ++failed;
        continue;
      }
      if (reply.value().body != front_replies[i]) ++wrong;
      ++answered;
    }
  });
  REQUIRE(testing::wait_until([&] { return answered.load() >= 30; }, std::chrono::seconds(15)));
  const int before_kill = answered.load();
  CHECK(replicas[2]->stop(SIGKILL) == 128 + SIGKILL);  // s1a
  const auto killed_at = Clock::now();
  std::this_thread::sleep_until(killed_at + std::chrono::milliseconds(1500));
  CHECK(testing::wait_until([&] { return answered.load() >= before_kill + 30; }, std::chrono::seconds(15)));
  stop = true;
  router.join();
  CHECK(failed.load() == 0);
  CHECK(wrong.load() == 0);
  // And once more every query, with the survivor alone serving shard 1.
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto reply = bus::request_retrying(conn, bus::Subjects().query_scores(), requests[i], policy);
    REQUIRE_MESSAGE(reply.ok(), reply.error().message);
    CHECK(reply.value().body == front_replies[i]);
  }
  // `kvidx score` unchanged against the sharded deployment (the front answers), and merging itself.
  {
    std::string hashes;
    for (const LocalBlockHash h : workload.queries[1]) hashes += (hashes.empty() ? "" : ",") + std::to_string(h.value);
    const std::string kvidx = testing::built_binary("kvidx");
    const auto via_front = testing::run_command({kvidx, "score", "--nats", cluster.urls(), "--hashes", hashes});
    REQUIRE_MESSAGE(via_front.exit_code == 0, via_front.err);
    CHECK(via_front.out == front_replies[1] + "\n");
    const auto merged_here =
        testing::run_command({kvidx, "score", "--nats", cluster.urls(), "--hashes", hashes, "--shards", "3"});
    REQUIRE_MESSAGE(merged_here.exit_code == 0, merged_here.err);
    CHECK(merged_here.out == front_replies[1] + "\n");
    // kv.admin.stats is per shard: the front says where to ask; `--shard` asks one; `--all` lists
    // every replica with its shard, compared within each shard.
    const auto stats = testing::run_command({kvidx, "stats", "--nats", cluster.urls()});
    CHECK(stats.exit_code == 1);
    CHECK(stats.err.find("kvidx stats --shard I/3") != std::string::npos);
    const auto one = testing::run_command({kvidx, "stats", "--nats", cluster.urls(), "--shard", "2/3"});
    REQUIRE_MESSAGE(one.exit_code == 0, one.err);
    CHECK(Json::parse(one.out).at("shard") == "2/3");
    const auto all = testing::run_command({kvidx, "stats", "--nats", cluster.urls(), "--all", "--window", "0.5"});
    REQUIRE_MESSAGE(all.exit_code == 0, all.err);
    const Json listed = Json::parse(all.out);
    CHECK(listed.at("replicas") == 5);  // s1a is dead
    CHECK(listed.at("agree") == true);
    CHECK(listed.at("by_replica").at(0).at("shard") == "0/3");
  }
  // The front's own account: every query answered, shard requests it sent again (after the kill).
  const auto front_scrape = testing::http_get(front_metrics, "/metrics");
  REQUIRE(front_scrape.has_value());
  CHECK(front_scrape->body.find("kvidx_front_queries_total{result=\"error\"} 0") != std::string::npos);
  std::string front_retry_line = "kvidx_front_shard_retries_total ?";
  if (const auto at = front_scrape->body.find("\nkvidx_front_shard_retries_total "); at != std::string::npos) {
    front_retry_line = front_scrape->body.substr(at + 1, front_scrape->body.find('\n', at + 1) - at - 1);
  }
  CHECK(testing::http_get(front_metrics, "/readyz").value_or(testing::HttpReply{}).status == 200);
  const std::uint64_t front_retries =
      scatter.value()->retries_sent();  // the client's own scatter: 0 unless a shard was slow
  CHECK(front.stop(SIGTERM) == 0);

  // The reference: one unsharded kvidx reading the same stream (the mapped subjects
  // kv.events.<shard>.<worker>, worker id from the payload), asked on kv.query.scores.
  ServeProcess whole(cluster.urls(), dir, "whole", {"--lanes", "1", "--snapshot-interval", "0"});
  const Json whole_stats = wait_acked(conn, whole, last);
  CHECK(whole_stats.at("dead_letters") == 0);
  CHECK(whole_stats.at("streams").get<std::uint64_t>() == shard_streams);
  std::vector<double> whole_us;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto t0 = Clock::now();
    auto reply = bus::request_retrying(conn, bus::Subjects().query_scores(), requests[i], policy);
    whole_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    REQUIRE_MESSAGE(reply.ok(), reply.error().message);
    INFO("query " << i << ": " << requests[i]);
    CHECK(reply.value().body == front_replies[i]);
  }
  CHECK(whole.stop(SIGTERM) == 0);
  MESSAGE(workload.events.size() << " events of " << workers.size() << " workers (per shard " << workers_per_shard[0]
                                 << "/" << workers_per_shard[1] << "/" << workers_per_shard[2] << "), "
                                 << requests.size() << " queries (" << with_tiers << " with tier_scores)");
  MESSAGE(latency_line("front (kv.query.scores -> 3 shards -> merge)", front_us));
  MESSAGE(latency_line("client merging the 3 shards itself", client_us));
  MESSAGE(latency_line("one unsharded kvidx", whole_us));
  MESSAGE(answered.load() << " queries through the front across the SIGKILL of s1a (" << before_kill
                          << " before): " << failed.load() << " failed, " << wrong.load()
                          << " differed; front: " << front_retry_line << "; client scatter retries " << front_retries);
  for (auto& r : replicas) {
    if (r->running()) CHECK(r->stop(SIGTERM) == 0);
  }
}

TEST_CASE(
    "shards: a shard's snapshot is restored by no other shard and no unsharded instance, and bad --shard values are "
    "refused") {
  testing::NatsServerOptions options;
  options.config_text = bus::shard_mapping_config("kv", kShards);
  testing::NatsServer server(options);
  TempDir dir;
  bus::Connection conn = connect_to_urls(server.url(), "kvidx-shards-test");
  const std::string kvidx = testing::built_binary("kvidx");
  for (const char* bad : {"3/3", "0/0", "x", "1/", "-1/3"}) {
    const auto r = testing::run_command({kvidx, "serve", "--nats", server.url(), "--metrics", "off", "--shard", bad});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(std::string("--shard ") + bad + ": ") != std::string::npos);
  }

  // Shard 0/3 writes its final snapshot at SIGTERM (worker 7 maps to shard 0).
  REQUIRE(bus::shard_of_worker(7, kShards) == 0);
  {
    ServeProcess s0(server, dir, "x", {"--shard", "0/3", "--snapshot-interval", "0"});
    REQUIRE(testing::wait_until([&] { return replica_answers(conn, std::chrono::milliseconds(300), 1).size() == 1; },
                                std::chrono::seconds(20)));
    auto js = bus::JetStream::create(conn);
    REQUIRE(js.ok());
    REQUIRE(js.value().publish("kv.events.7", encode_router_event(testing::make_store_event(7, {1, 2, 3}))).ok());
    REQUIRE(testing::wait_until(
        [&] {
          auto a = replica_answers(conn, std::chrono::milliseconds(300), 1);
          return a.size() == 1 && a[0].at("blocks") == 3;
        },
        std::chrono::seconds(20)));
    CHECK(s0.stop(SIGTERM) == 0);
  }
  // The same durable unsharded, or as another shard: refused, saying why.
  for (const std::vector<std::string>& shard_flags :
       {std::vector<std::string>{}, std::vector<std::string>{"--shard", "1/3"}}) {
    std::vector<std::string> args = {kvidx, "serve", "--nats", server.url(), "--metrics", "off", "--durable", "x"};
    args.insert(args.end(), shard_flags.begin(), shard_flags.end());
    const auto r = testing::run_command(args);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("durable 'x' has a snapshot written by shard 0/3") != std::string::npos);
    CHECK(r.err.find("refusing") != std::string::npos);
  }
  // A new replica of shard 0 bootstraps from x's snapshot; a new unsharded instance does not.
  ServeProcess y(server, dir, "y", {"--shard", "0/3", "--snapshot-interval", "0"});
  ServeProcess z(server, dir, "z", {"--snapshot-interval", "0"});
  std::map<std::string, Json> by_name;
  REQUIRE(testing::wait_until(
      [&] {
        for (const Json& a : replica_answers(conn, std::chrono::milliseconds(300), 2)) {
          by_name[a.at("replica").get<std::string>()] = a;
        }
        return by_name.size() == 2 && by_name["y"].at("acked_sequence") == 1 && by_name["z"].at("acked_sequence") == 1;
      },
      std::chrono::seconds(20)));
  CHECK(by_name["y"].at("restored_from") == "x");
  CHECK(by_name["y"].at("shard") == "0/3");
  CHECK(by_name["y"].at("blocks") == 3);
  CHECK(by_name["z"].at("restored_from") == "");
  CHECK_FALSE(by_name["z"].contains("shard"));
  CHECK(by_name["z"].at("blocks") == 3);  // read from the stream (kv.events.0.7: worker id from the subject)
  CHECK(y.stop(SIGTERM) == 0);
  CHECK(z.stop(SIGTERM) == 0);
  // A shard whose N differs from the server's mapping's: what reaches it for another shard is
  // dead-lettered with the mapping it needs, never indexed (worker 0: partition 0 of 3, 1 of 2).
  {
    REQUIRE(bus::shard_of_worker(0, 3) == 0);
    REQUIRE(bus::shard_of_worker(0, 2) == 1);
    auto dead = conn.subscribe_sync("kv.deadletter");
    REQUIRE(dead.ok());
    REQUIRE(conn.flush().ok());
    ServeProcess m(server, dir, "m", {"--shard", "0/2", "--snapshot-interval", "0"});
    REQUIRE(testing::wait_until(
        [&] {
          for (const Json& a : replica_answers(conn, std::chrono::milliseconds(300), 1)) {
            if (a.at("replica") == "m") return true;
          }
          return false;
        },
        std::chrono::seconds(20)));
    auto js = bus::JetStream::create(conn);
    REQUIRE(js.ok());
    REQUIRE(js.value().publish("kv.events.0", encode_router_event(testing::make_store_event(0, {4, 5}))).ok());
    bool found = false;
    for (int i = 0; i < 2 && !found; ++i) {
      auto letter = dead.value().next(10000);
      REQUIRE(letter.ok());
      const auto reason = letter.value().header("Kvidx-Reason").value_or("");
      found = letter.value().subject() == std::string_view("kv.deadletter") &&
              reason.find("worker 0 belongs to shard 1 of 2, not 0") != std::string::npos &&
              reason.find("{{partition(2,1)}}") != std::string::npos;
    }
    CHECK(found);
    CHECK(m.stop(SIGTERM) == 0);
  }
}

}  // TEST_SUITE("cluster")
