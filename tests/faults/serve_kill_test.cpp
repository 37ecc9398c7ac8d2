// Fault: `kvidx serve` killed with SIGKILL at seeded random points while events keep arriving,
// then restarted. Each restart restores the newest snapshot (periodic, every 200 ms), re-reads
// the stream from the snapshot's sequence, and the final index equals an offline sequential apply.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <random>
#include <thread>

#include "tests/faults/fault_support.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsServer;
using kvidx::testing::TempDir;

namespace {

void run_serve_kills(WorkerId workers, DpRank ranks, int events_per_stream, int kills, std::uint64_t seed) {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  ensure_events_stream(conn);
  const Histories histories = branching_histories(workers, ranks, events_per_stream, seed);
  const auto events = interleave(histories);
  const std::vector<std::string> flags = {"--lanes", "2", "--snapshot-interval", "200ms", "--fetch-batch", "100"};

  // Publisher: paced so publishing spans all the kills (~700 ms per kill cycle).
  std::atomic<bool> publish_failed{false};
  std::atomic<std::size_t> published{0};
  const auto pace = std::chrono::microseconds(700'000LL * (kills + 1) / static_cast<long long>(events.size()));
  std::thread publisher([&] {
    bus::Connection pub = connect_to(server);
    auto js = bus::JetStream::create(pub);
    if (!js.ok()) {
      publish_failed = true;
      return;
    }
    const bus::Subjects subjects;
    for (const RouterEvent* e : events) {
      if (!js.value().publish_async(subjects.events(e->worker_id), encode_router_event(*e)).ok()) publish_failed = true;
      ++published;
      if (published % 16 == 0) std::this_thread::sleep_for(pace * 16);
    }
    if (!js.value().publish_async_complete(30000).ok()) publish_failed = true;
  });

  std::mt19937_64 rng(seed);
  std::uint64_t previous_restored = 0;
  int restored_nonzero = 0;
  for (int k = 0; k < kills; ++k) {
    ServeProcess victim(server, dir, "victim", flags);
    const Json ready = wait_ready(conn, victim);
    const auto restored = ready.at("restored_sequence").get<std::uint64_t>();
    CHECK(restored >= previous_restored);  // the newest snapshot, never an older one
    previous_restored = restored;
    if (restored > 0) ++restored_nonzero;
    std::this_thread::sleep_for(std::chrono::milliseconds(250 + rng() % 900));
    CHECK(victim.stop(SIGKILL) == 128 + SIGKILL);
  }
  publisher.join();
  REQUIRE_FALSE(publish_failed.load());
  CHECK(restored_nonzero >= kills - 1);

  ServeProcess last_run(server, dir, "victim", flags);
  const Json ready = wait_ready(conn, last_run);
  CHECK(ready.at("restored_sequence").get<std::uint64_t>() >= previous_restored);
  const std::uint64_t last = stream_last_sequence(conn);
  CHECK(last == events.size());
  const Json stats = wait_acked(conn, last_run, last);
  const OfflineResult expected = offline_apply(events);
  CHECK(normal_form(admin_dump(conn)) == expected.form);
  CHECK(stats.at("blocks") == expected.sizes.block_count);
  CHECK(nodes_within_bound(stats));  // bounded, not compared (see fault_support.h)
  CHECK(stats.at("gaps") == 0);
  CHECK(stats.at("resets") == 0);
  CHECK(stats.at("dead_letters") == 0);
  MESSAGE(kills << " SIGKILLs, " << events.size() << " events, last restore from sequence "
                << ready.at("restored_sequence").get<std::uint64_t>());
  CHECK(last_run.stop(SIGTERM) == 0);
}

}  // namespace

TEST_SUITE("faults") {
TEST_CASE(
    "faults: kvidx serve SIGKILLed 5 times at seeded random points restores the newest snapshot and matches an offline "
    "apply") {
  run_serve_kills(8, 2, 150, 5, 42);
}
}  // TEST_SUITE("faults")

TEST_SUITE("long") {
TEST_CASE("faults long: kvidx serve SIGKILLed 20 times under a larger stream") {
  run_serve_kills(32, 2, 400, 20, 4242);
}
}  // TEST_SUITE("long")
