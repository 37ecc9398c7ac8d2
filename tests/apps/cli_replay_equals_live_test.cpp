// Offline replay rebuilds exactly what the live service built: the same log, published to a real
// `kvidx serve` and replayed with `kvidx replay` / `dump --events` / `stats --events`, gives the
// same scores, the same holdings and the same ordering counters (duplicates skipped, gaps,
// publisher restarts), because both go through the one intake (libindexer/intake/event_intake.h).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "replay/event_log_writer.h"
#include "tests/support/child_process.h"
#include "tests/support/dump_holdings.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

const std::string kKvidx = built_binary("kvidx");

RouterEvent with_id(RouterEvent e, std::uint64_t id, DpRank rank = 0) {
  e.event.event_id = id;
  e.event.dp_rank = rank;
  return e;
}

// A running `kvidx serve` on its own nats-server.
struct LiveService {
  NatsServer server;
  ChildProcess serve;

  LiveService(const TempDir& dir, std::vector<std::string> extra)
      : serve(
            [&] {
              std::vector<std::string> args{
                  kKvidx, "serve", "--nats", server.url(), "--metrics", "off", "--snapshot-interval", "0"};
              args.insert(args.end(), extra.begin(), extra.end());
              return args;
            }(),
            dir.file("serve.log")) {}

  bool wait_ready() {
    return wait_until(
        [&] {
          return run_command({kKvidx, "stats", "--nats", server.url(), "--timeout", "1"}).exit_code == 0;
        },
        std::chrono::seconds(20));
  }

  nlohmann::json stats() {
    auto r = run_command({kKvidx, "stats", "--nats", server.url(), "--timeout", "2"});
    if (r.exit_code != 0) return nlohmann::json::object();
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  // Waits until every published line was either handed to the lanes or skipped as a duplicate.
  bool wait_all_taken(std::uint64_t lines) {
    return wait_until(
        [&] {
          const auto s = stats();
          return s.contains("events_applied") &&
                 s["events_applied"].get<std::uint64_t>() + s["duplicates"].get<std::uint64_t>() == lines;
        },
        std::chrono::seconds(30));
  }
};

// A seeded fleet of publishers whose log holds redeliveries (an event sent again with its id),
// gaps (events the publisher produced but that never reached the log) and publisher restarts
// (event_id back to 0, cache empty), interleaved across streams.
std::size_t write_faulty_log(const std::string& path, std::uint32_t seed) {
  struct Publisher {
    WorkerId worker = 0;
    DpRank rank = 0;
    std::uint64_t next_id = 0;
    Hashes chain;                      // the locals of the blocks it holds, as one chain
    std::vector<RouterEvent> history;  // sent since its last restart (redelivery candidates)
  };
  std::mt19937 rng(seed);
  auto pick = [&](std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng); };
  std::vector<Publisher> publishers;
  for (WorkerId w = 1; w <= 3; ++w) {
    for (DpRank r = 0; r < 2; ++r) publishers.push_back(Publisher{w, r, 0, {}, {}});
  }
  EventLogWriter log(path);
  std::size_t lines = 0;
  auto emit = [&](Publisher& p, RouterEvent e, bool lost) {
    e = with_id(std::move(e), p.next_id++, p.rank);
    if (lost) return;  // a gap: produced, never delivered
    p.history.push_back(e);
    log.write(e);
    ++lines;
  };
  for (int step = 0; step < 600; ++step) {
    Publisher& p = publishers[pick(publishers.size())];
    const auto roll = pick(100);
    if (roll < 10 && !p.history.empty()) {  // redelivery of any earlier event of this run
      log.write(p.history[pick(p.history.size())]);
      ++lines;
    } else if (roll < 15) {  // restart: ids from 0, nothing cached
      p.next_id = 0;
      p.chain.clear();
      p.history.clear();
    } else if (roll < 20) {
      p.chain.clear();
      emit(p, make_clear_event_with_dp_rank(p.worker, p.rank), pick(4) == 0);
    } else if (roll < 40 && !p.chain.empty()) {
      const std::size_t n = std::min<std::size_t>(p.chain.size(), 1 + pick(2));
      const Hashes prefix(p.chain.begin(), p.chain.end() - static_cast<std::ptrdiff_t>(n));
      const Hashes tail(p.chain.end() - static_cast<std::ptrdiff_t>(n), p.chain.end());
      p.chain = prefix;
      emit(p, remove_event(p.worker, 0, p.rank, remove_hashes_with_parent(prefix, tail)), pick(8) == 0);
    } else {
      // Small alphabet: streams often store the same prefixes, so the tree shares nodes.
      Hashes blocks;
      for (std::uint64_t i = 0, n = 1 + pick(3); i < n; ++i) blocks.push_back(1 + pick(4));
      auto e = make_store_event_with_parent(p.worker, p.chain, blocks);
      p.chain.insert(p.chain.end(), blocks.begin(), blocks.end());
      emit(p, std::move(e), pick(8) == 0);
    }
  }
  REQUIRE(log.close());
  return lines;
}

void check_offline_equals_live(std::uint32_t seed, const std::vector<std::string>& ordering_flags) {
  CAPTURE(seed);
  TempDir dir;
  const std::string log_path = dir.file("faulty.jsonl");
  const std::size_t lines = write_faulty_log(log_path, seed);

  LiveService live(dir, ordering_flags);
  REQUIRE(live.wait_ready());
  auto published = run_command({kKvidx, "publish", "--nats", live.server.url(), "--events", log_path});
  REQUIRE_MESSAGE(published.exit_code == 0, published.err);
  REQUIRE(live.wait_all_taken(lines));
  auto live_dump = run_command({kKvidx, "dump", "--nats", live.server.url()});
  REQUIRE_MESSAGE(live_dump.exit_code == 0, live_dump.err);
  const auto live_stats = live.stats();

  std::vector<std::string> dump_args{kKvidx, "dump", "--events", log_path};
  dump_args.insert(dump_args.end(), ordering_flags.begin(), ordering_flags.end());
  auto offline_dump = run_command(dump_args);
  REQUIRE_MESSAGE(offline_dump.exit_code == 0, offline_dump.err);
  const auto live_holdings = dump_holdings(live_dump.out);
  CHECK(!live_holdings.empty());
  CHECK(dump_holdings(offline_dump.out) == live_holdings);

  // The same ordering counters offline as live.
  std::vector<std::string> stats_args{kKvidx, "stats", "--events", log_path};
  stats_args.insert(stats_args.end(), ordering_flags.begin(), ordering_flags.end());
  auto offline_stats = run_command(stats_args);
  REQUIRE_MESSAGE(offline_stats.exit_code == 0, offline_stats.err);
  const auto s = nlohmann::json::parse(offline_stats.out);
  CHECK(live_stats["duplicates"].get<std::uint64_t>() > 0);
  CHECK(live_stats["gaps"].get<std::uint64_t>() > 0);
  CHECK(live_stats["resets"].get<std::uint64_t>() > 0);
  for (const std::string counter : {"duplicates", "gaps", "missing_events", "resets"}) {
    CAPTURE(counter);
    CHECK(s[counter] == live_stats[counter]);
  }
  CHECK(s["blocks"] == live_stats["blocks"]);
  CHECK(s["events_by_result"]["parent_not_found"] == live_stats["apply_parent_not_found"]);
  CHECK(live.serve.stop() == 0);
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("replay of a log with a redelivered remove and a publisher restart scores as the live service") {
  TempDir dir;
  // Worker 1 stores blocks 1,2, removes 2; the removal is redelivered; the publisher restarts
  // (event_id 0, its cache empty as far as the index must assume) and stores 2 under 1.
  {
    EventLogWriter log(dir.file("events.jsonl"));
    log.write(with_id(make_store_event(1, {1, 2}), 0));
    const auto removal = remove_event(1, 1, 0, remove_hashes_with_parent({1}, {2}));
    log.write(removal);
    log.write(removal);
    log.write(with_id(make_store_event_with_parent(1, {1}, {2}), 0));
    REQUIRE(log.close());
  }
  {
    std::ofstream queries(dir.file("queries.jsonl"));
    queries << R"({"id": 1, "local_hashes": [1, 2]})" << '\n';
  }

  LiveService live(dir, {});
  REQUIRE(live.wait_ready());
  auto published = run_command({kKvidx, "publish", "--nats", live.server.url(), "--events", dir.file("events.jsonl")});
  REQUIRE_MESSAGE(published.exit_code == 0, published.err);
  // Live: the redelivery is skipped; the restart clears worker 1 first, so the Stored under 1 is
  // rejected (parent not found).
  REQUIRE(wait_until(
      [&] {
        const auto s = live.stats();
        return s.contains("apply_parent_not_found") && s["apply_parent_not_found"] == 1;
      },
      std::chrono::seconds(30)));
  const auto live_stats = live.stats();
  CHECK(live_stats["duplicates"] == 1);
  CHECK(live_stats["resets"] == 1);
  auto score = run_command({kKvidx, "score", "--nats", live.server.url(), "--hashes", "1,2"});
  REQUIRE_MESSAGE(score.exit_code == 0, score.err);
  const auto live_scores = nlohmann::json::parse(score.out)["scores"];
  CHECK(live_scores == nlohmann::json::array());

  auto replay = run_command({kKvidx, "replay", "--events", dir.file("events.jsonl"), "--queries",
                             dir.file("queries.jsonl"), "--scores-out", dir.file("scores.jsonl")});
  REQUIRE_MESSAGE(replay.exit_code == 0, replay.err);
  std::ifstream answers(dir.file("scores.jsonl"));
  std::string line;
  REQUIRE(std::getline(answers, line));
  CHECK(nlohmann::json::parse(line)["scores"] == live_scores);
  // The summary reports the ordering counters as the service's stats do.
  CHECK_MESSAGE(replay.err.find("duplicates skipped 1") != std::string::npos, replay.err);
  CHECK_MESSAGE(replay.err.find("restarts 1") != std::string::npos, replay.err);
  CHECK(live.serve.stop() == 0);
}

TEST_CASE("a log with redeliveries, gaps and restarts dumps offline as the live service holds it") {
  for (std::uint32_t seed : {17u, 2024u}) check_offline_equals_live(seed, {});
}

TEST_CASE("a log spread over storage tiers replays offline to the tiers and scores the live service holds") {
  TempDir dir;
  auto on = [](RouterEvent e, std::uint64_t id, std::optional<StorageTier> tier) {
    e = with_id(std::move(e), id);
    e.storage_tier = tier;
    return e;
  };
  std::size_t lines = 0;
  {
    EventLogWriter log(dir.file("tiers.jsonl"));
    auto write = [&](const RouterEvent& e) {
      log.write(e);
      ++lines;
    };
    // Worker 1 offloads 1,2,3 to host_pinned, evicts 3 from device, keeps 1 on disk; a redelivery.
    write(on(make_store_event(1, {1, 2, 3}), 0, std::nullopt));
    write(on(make_store_event(1, {1, 2, 3}), 1, StorageTier::host_pinned));
    write(on(make_remove_event_with_parent(1, {1, 2}, {3}), 2, StorageTier::device));
    const RouterEvent disk = on(make_store_event(1, {1}), 3, StorageTier::disk);
    write(disk);
    write(disk);
    // Worker 2: external, then a Cleared tagged host_pinned (clears every tier), then host_pinned
    // again, then a publisher restart (every tier cleared) and device blocks.
    write(on(make_store_event(2, {1, 2}), 0, StorageTier::external));
    write(on(make_clear_event_with_dp_rank(2, 0), 1, StorageTier::host_pinned));
    write(on(make_store_event(2, {1}), 2, StorageTier::host_pinned));
    write(on(make_store_event(2, {1, 2}), 3, StorageTier::disk));
    write(on(make_store_event(2, {1, 2}), 0, std::nullopt));
    // Worker 3: only external.
    write(on(make_store_event(3, {1, 2, 3}), 0, StorageTier::external));
    REQUIRE(log.close());
  }
  {
    std::ofstream queries(dir.file("queries.jsonl"));
    queries << R"({"id": 1, "local_hashes": [1, 2, 3]})" << '\n';
  }

  LiveService live(dir, {"--tier-weights", "disk=0.5"});
  REQUIRE(live.wait_ready());
  auto published = run_command({kKvidx, "publish", "--nats", live.server.url(), "--events", dir.file("tiers.jsonl")});
  REQUIRE_MESSAGE(published.exit_code == 0, published.err);
  REQUIRE(live.wait_all_taken(lines));
  const auto live_stats = live.stats();
  CHECK(live_stats["duplicates"] == 1);
  CHECK(live_stats["resets"] == 1);

  auto live_dump = run_command({kKvidx, "dump", "--nats", live.server.url()});
  REQUIRE_MESSAGE(live_dump.exit_code == 0, live_dump.err);
  auto offline_dump = run_command({kKvidx, "dump", "--events", dir.file("tiers.jsonl")});
  REQUIRE_MESSAGE(offline_dump.exit_code == 0, offline_dump.err);
  const auto live_holdings = dump_holdings(live_dump.out);
  CHECK(dump_holdings(offline_dump.out) == live_holdings);
  std::set<std::string> tiers_held;
  for (const auto& holding : live_holdings) tiers_held.insert(std::get<4>(holding));
  CHECK(tiers_held == std::set<std::string>{"device", "host_pinned", "disk", "external"});

  auto score = run_command({kKvidx, "score", "--nats", live.server.url(), "--hashes", "1,2,3"});
  REQUIRE_MESSAGE(score.exit_code == 0, score.err);
  const auto live_reply = nlohmann::json::parse(score.out);
  // Device: worker 1 holds 1,2 (3 evicted), worker 2 1,2 after its restart.
  CHECK(live_reply["scores"] ==
        nlohmann::json::parse(R"([{"worker_id":1,"dp_rank":0,"score":2},{"worker_id":2,"dp_rank":0,"score":2}])"));
  CHECK(live_reply["tier_scores"] == nlohmann::json::parse(R"({"host_pinned":[{"worker_id":1,"dp_rank":0,"score":3}],
                                  "disk":[{"worker_id":1,"dp_rank":0,"score":1}],
                                  "external":[{"worker_id":3,"dp_rank":0,"score":3}]})"));
  auto replay =
      run_command({kKvidx, "replay", "--events", dir.file("tiers.jsonl"), "--queries", dir.file("queries.jsonl"),
                   "--scores-out", dir.file("scores.jsonl"), "--tier-weights", "disk=0.5"});
  REQUIRE_MESSAGE(replay.exit_code == 0, replay.err);
  std::ifstream answers(dir.file("scores.jsonl"));
  std::string line;
  REQUIRE(std::getline(answers, line));
  const auto offline = nlohmann::json::parse(line);
  CHECK(offline["scores"] == live_reply["scores"]);
  CHECK(offline["tier_scores"] == live_reply["tier_scores"]);
  REQUIRE(offline["combined_scores"].size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(offline["combined_scores"][i]["worker_id"] == live_reply["combined_scores"][i]["worker_id"]);
    CHECK(offline["combined_scores"][i]["score"].get<double>() ==
          doctest::Approx(live_reply["combined_scores"][i]["score"].get<double>()));
  }
  // Worker 1: 2 device blocks, then the third from host_pinned.
  CHECK(live_reply["combined_scores"][0]["score"].get<double>() == doctest::Approx(2 + 0.75));
  CHECK(live_reply["combined_scores"][2]["score"].get<double>() == doctest::Approx(3 * 0.1));

  auto offline_stats = run_command({kKvidx, "stats", "--events", dir.file("tiers.jsonl")});
  REQUIRE_MESSAGE(offline_stats.exit_code == 0, offline_stats.err);
  const auto s = nlohmann::json::parse(offline_stats.out);
  for (const std::string tier : {"device", "host_pinned", "disk", "external"}) {
    CAPTURE(tier);
    CHECK(s["tiers"][tier]["blocks"] == live_stats["tiers"][tier]["blocks"]);
    CHECK(s["tiers"][tier]["streams"] == live_stats["tiers"][tier]["streams"]);
  }
  CHECK(s["tiers"]["external"]["blocks"] == 3);
  auto tree = run_command({kKvidx, "dump", "--events", dir.file("tiers.jsonl"), "--tree"});
  REQUIRE_MESSAGE(tree.exit_code == 0, tree.err);
  CHECK_MESSAGE(tree.out.find("tier host_pinned:\n[1 2 3] (3 blocks) 1/0\n") != std::string::npos, tree.out);
  CHECK(live.serve.stop() == 0);
}

TEST_CASE("with --clear-on-gap a faulty log dumps offline as the live service holds it") {
  check_offline_equals_live(99u, {"--clear-on-gap"});
}

}  // TEST_SUITE("integration")
