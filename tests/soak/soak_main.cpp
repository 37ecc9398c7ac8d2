// kvidx_soak: scripts/soak's driver. Starts an embedded nats-server (JetStream, 127.0.0.1) and the
// built `kvidx serve`, then for a bounded time publishes Mooncake-derived KV events (simulated LRU
// workers, replay/mooncake_workload.h) at a fixed rate and sends score queries at a fixed rate.
// Reports kvidx's RSS over time and query latency percentiles. At every checkpoint it pauses,
// waits until kvidx has acknowledged everything, and requires kvidx's block count to equal the live
// set of a reference model of the same events (no growth beyond the live set); exits 1 otherwise.
// The trace is replayed in rounds (every worker clears between rounds, as after a fleet restart).
#include <signal.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"
#include "replay/mooncake_workload.h"
#include "tests/support/child_process.h"
#include "tests/support/nats_server.h"
#include "tests/support/reference_index.h"

using namespace kvidx;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

namespace {

std::uint64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  return values[i];
}

struct Options {
  double minutes = 10;
  double seconds = 0;  // overrides minutes when > 0
  double rate = 2000;  // events per second
  double query_rate = 50;
  std::uint64_t max_events = 0;  // 0: rate x duration
  double checkpoint_s = 30;
  std::string trace = std::string(KVIDX_SOURCE_DIR) + "/tests/data/traces/mooncake_conversation_trace.jsonl";
  std::size_t lanes = 2;
  std::size_t workers = 8;
  std::size_t capacity = 512;
  std::uint64_t max_rss_mib = 0;  // 0: report only
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kvidx soak: fixed-rate events and queries against kvidx serve on an embedded nats-server"};
  app.add_option("--minutes", o.minutes, "Duration in minutes")->capture_default_str();
  app.add_option("--seconds", o.seconds, "Duration in seconds (overrides --minutes)");
  app.add_option("--rate", o.rate, "Events per second")->capture_default_str()->check(CLI::Range(1.0, 1e6));
  app.add_option("--query-rate", o.query_rate, "Score queries per second")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e5));
  app.add_option("--max-events", o.max_events, "Stop after this many events (0: rate x duration)");
  app.add_option("--checkpoint", o.checkpoint_s, "Seconds between checkpoints (RSS line, live-set check)")
      ->capture_default_str();
  app.add_option("--trace", o.trace, "Mooncake trace (JSON lines)")->capture_default_str();
  app.add_option("--lanes", o.lanes, "kvidx serve --lanes")->capture_default_str();
  app.add_option("--workers", o.workers, "Simulated workers (2 ranks each)")->capture_default_str();
  app.add_option("--capacity", o.capacity, "Blocks per (worker, rank) cache")->capture_default_str();
  app.add_option("--max-rss-mib", o.max_rss_mib, "Fail when kvidx's RSS exceeds this (0: report only)");
  CLI11_PARSE(app, argc, argv);
  const double duration_s = o.seconds > 0 ? o.seconds : o.minutes * 60;
  const std::uint64_t max_events = o.max_events ? o.max_events : static_cast<std::uint64_t>(o.rate * duration_s) + 1;

  std::vector<MooncakeRequest> trace;
  std::string error;
  if (!load_mooncake_trace(o.trace, trace, error)) {
    std::fprintf(stderr, "kvidx_soak: %s\n", error.c_str());
    return 2;
  }

  testing::NatsServer server;
  testing::TempDir dir;
  testing::ChildProcess serve(
      {testing::built_binary("kvidx"), "--log-level", "warn", "serve", "--nats", server.url(), "--metrics", "off",
       "--durable", "soak", "--lanes", std::to_string(o.lanes), "--snapshot-interval", "20s"},
      dir.file("serve.log"));
  bus::ConnectionOptions copts;
  copts.url = server.url();
  auto conn_result = bus::Connection::connect(copts);
  if (!conn_result.ok()) return 4;
  bus::Connection conn = std::move(conn_result).value();
  const bus::Subjects subjects;
  auto stats = [&](std::int64_t timeout_ms) -> std::optional<Json> {
    auto reply = conn.request(subjects.admin_stats(), "{}", timeout_ms);
    if (!reply.ok()) return std::nullopt;
    return Json::parse(reply.value().data());
  };
  const auto ready_deadline = Clock::now() + std::chrono::seconds(30);
  while (!stats(500)) {
    if (!serve.running() || Clock::now() > ready_deadline) {
      std::fprintf(stderr, "kvidx_soak: kvidx serve did not start\n");
      return 1;
    }
  }
  auto js_result = bus::JetStream::create(conn);
  if (!js_result.ok()) return 4;
  bus::JetStream js = std::move(js_result).value();

  testing::ReferenceIndex model;
  std::map<WorkerWithDpRank, std::uint64_t> next_id;
  std::vector<double> latencies_ms;  // all queries
  std::vector<double> window_ms;     // since the last checkpoint
  std::uint64_t published = 0;
  std::uint64_t queries = 0;
  std::uint64_t query_errors = 0;
  bool failed = false;
  std::uint64_t rss_first = 0;
  std::uint64_t rss_peak = 0;
  const auto start = Clock::now();
  auto next_checkpoint =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.checkpoint_s));
  auto next_query = start;
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration_s));
  RoutedRequest last_request;
  std::printf("%8s %10s %10s %10s %10s %12s %12s\n", "t_s", "events", "rss_mib", "blocks", "live_set", "q_p50_ms",
              "q_p99_ms");

  // Pauses publishing until kvidx acknowledged everything, then compares with the live set.
  auto checkpoint = [&](bool final) {
    if (js.publish_async_complete(60000).ok() == false) failed = true;
    auto state = js.stream_state("KV_EVENTS");
    if (!state.ok()) {
      failed = true;
      return;
    }
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    std::optional<Json> s;
    while (Clock::now() < deadline) {
      s = stats(2000);
      if (s && s->at("acked_sequence").get<std::uint64_t>() >= state.value().last_sequence) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const std::uint64_t rss = rss_kib(serve.pid());
    if (rss_first == 0) rss_first = rss;
    rss_peak = std::max(rss_peak, rss);
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    const std::uint64_t blocks = s ? s->at("blocks").get<std::uint64_t>() : 0;
    std::printf("%8.1f %10llu %10.1f %10llu %10zu %12.3f %12.3f%s\n", t, static_cast<unsigned long long>(published),
                static_cast<double>(rss) / 1024.0, static_cast<unsigned long long>(blocks), model.total_blocks(),
                percentile(window_ms, 0.5), percentile(window_ms, 0.99), final ? "  (final)" : "");
    std::fflush(stdout);
    window_ms.clear();
    if (!s || s->at("acked_sequence").get<std::uint64_t>() < state.value().last_sequence) {
      std::fprintf(stderr, "kvidx_soak: FAIL kvidx did not catch up with the stream\n");
      failed = true;
    } else if (blocks != model.total_blocks()) {
      std::fprintf(stderr, "kvidx_soak: FAIL kvidx holds %llu blocks, the live set is %zu\n",
                   static_cast<unsigned long long>(blocks), model.total_blocks());
      failed = true;
    } else if (s->at("dead_letters").get<std::uint64_t>() != 0 || s->at("gaps").get<std::uint64_t>() != 0) {
      std::fprintf(stderr, "kvidx_soak: FAIL dead letters or gaps: %s\n", s->dump().c_str());
      failed = true;
    }
    if (o.max_rss_mib && rss / 1024 > o.max_rss_mib) {
      std::fprintf(stderr, "kvidx_soak: FAIL RSS %llu MiB above --max-rss-mib\n",
                   static_cast<unsigned long long>(rss / 1024));
      failed = true;
    }
  };

  auto query = [&] {
    if (last_request.local_hashes.empty()) return;
    const auto t0 = Clock::now();
    auto reply = conn.request(subjects.query_scores(), encode_score_request({last_request.local_hashes, false}), 2000);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ++queries;
    if (!reply.ok() || !decode_score_reply(reply.value().data()).ok()) {
      ++query_errors;
      return;
    }
    latencies_ms.push_back(ms);
    window_ms.push_back(ms);
  };

  WorkloadOptions wopts;
  wopts.workers = o.workers;
  wopts.dp_ranks = 2;
  wopts.capacity_blocks = o.capacity;
  bool done = false;
  for (std::uint64_t round = 0; !done && !failed && round < 1000; ++round) {
    wopts.seed = round + 1;
    // A new round starts from empty caches: every stream clears first (continuing its ids).
    for (auto& [stream, id] : next_id) {
      RouterEvent clear{stream.worker_id, KvCacheEvent{id++, KvCacheClearData{}, stream.dp_rank}, std::nullopt};
      model.apply(clear);
      (void)js.publish_async(subjects.events(stream.worker_id), encode_router_event(clear));
      ++published;
    }
    simulate_workload(
        trace, wopts,
        WorkloadSink{[&](RouterEvent&& event) {
                       if (done || failed) return;
                       const auto now = Clock::now();
                       if (now >= end || published >= max_events || !serve.running()) {
                         done = true;
                         return;
                       }
                       event.event.event_id = next_id[event.stream()]++;
                       model.apply(event);
                       if (!js.publish_async(subjects.events(event.worker_id), encode_router_event(event)).ok()) {
                         failed = true;
                       }
                       ++published;
                       // Fixed rate: sleep until this event's slot.
                       const auto slot =
                           start + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(static_cast<double>(published) / o.rate));
                       while (o.query_rate > 0 && Clock::now() >= next_query) {
                         query();
                         next_query += std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(1.0 / o.query_rate));
                       }
                       if (slot > Clock::now()) std::this_thread::sleep_until(slot);
                       if (Clock::now() >= next_checkpoint) {
                         checkpoint(false);
                         next_checkpoint = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                              std::chrono::duration<double>(o.checkpoint_s));
                       }
                     },
                     [&](const RoutedRequest& r) { last_request = r; }});
  }
  if (!serve.running()) {
    std::fprintf(stderr, "kvidx_soak: FAIL kvidx serve exited\n");
    failed = true;
  }
  checkpoint(true);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "soak: %.1f s, %llu events (%.0f/s), %llu queries (%llu errors), query p50 %.3f ms p99 %.3f ms, "
      "RSS first %.1f MiB peak %.1f MiB, live set %zu blocks: %s\n",
      elapsed, static_cast<unsigned long long>(published), static_cast<double>(published) / elapsed,
      static_cast<unsigned long long>(queries), static_cast<unsigned long long>(query_errors),
      percentile(latencies_ms, 0.5), percentile(latencies_ms, 0.99), static_cast<double>(rss_first) / 1024.0,
      static_cast<double>(rss_peak) / 1024.0, model.total_blocks(), failed ? "FAIL" : "ok");
  if (serve.stop(SIGTERM) != 0) {
    std::fprintf(stderr, "kvidx_soak: FAIL kvidx serve did not stop cleanly\n");
    failed = true;
  }
  if (query_errors > queries / 100) failed = true;
  return failed ? 1 : 0;
}
