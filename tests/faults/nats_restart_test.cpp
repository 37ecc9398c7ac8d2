// Fault: nats-server (JetStream file store) killed with SIGKILL and restarted mid-stream while
// `kvidx serve` consumes. kvidx must reconnect, resume its durable consumer and end with exactly
// the index an offline sequential apply of everything published gives.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <thread>

#include "tests/faults/fault_support.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsServer;
using kvidx::testing::TempDir;

namespace {

void run_nats_restarts(WorkerId workers, DpRank ranks, int events_per_stream, int outages) {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  ensure_events_stream(conn);
  ServeProcess serve(server, dir, "main", {"--lanes", "2", "--snapshot-interval", "0", "--fetch-batch", "200"});
  wait_ready(conn, serve);

  const Histories histories = branching_histories(workers, ranks, events_per_stream, 1);
  const auto events = interleave(histories);
  bus::Connection pub = connect_to(server);
  auto js = bus::JetStream::create(pub);
  REQUIRE(js.ok());
  const auto deadline = Clock::now() + std::chrono::seconds(60);

  // The outages come from another thread at fixed points of the publish sequence, so kvidx is
  // mid-stream (fetch and acks in flight) and the publisher mid-publish when the server dies.
  std::atomic<std::size_t> published{0};
  std::atomic<int> outages_done{0};
  std::thread killer([&] {
    for (int k = 1; k <= outages; ++k) {
      const std::size_t at = events.size() * static_cast<std::size_t>(k) / static_cast<std::size_t>(outages + 1);
      while (published.load() < at && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      server.kill9();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      server.restart();
      ++outages_done;
    }
  });
  int retries = 0;
  const bus::Subjects subjects;
  for (const RouterEvent* e : events) {
    publish_retrying(js.value(), subjects.events(e->worker_id), encode_router_event(*e), deadline, &retries);
    ++published;
  }
  killer.join();
  REQUIRE(outages_done.load() == outages);
  MESSAGE(events.size() << " events published through " << outages << " server kills, " << retries
                        << " publish retries");

  const std::uint64_t last = stream_last_sequence(conn);
  CHECK(last >= events.size());  // a retried publish may be stored twice
  const Json stats = wait_acked(conn, serve, last);
  const OfflineResult expected = offline_apply(events);
  CHECK(normal_form(admin_dump(conn)) == expected.form);
  CHECK(stats.at("blocks") == expected.sizes.block_count);
  CHECK(nodes_within_bound(stats));  // bounded, not compared (see fault_support.h)
  CHECK(stats.at("gaps") == 0);
  CHECK(stats.at("dead_letters") == 0);
  CHECK(stats.at("events_applied").get<std::uint64_t>() == events.size());
  CHECK(serve.running());
  CHECK(serve.log().find("NATS connection lost") != std::string::npos);
  CHECK(serve.stop(SIGTERM) == 0);
}

}  // namespace

TEST_SUITE("faults") {
TEST_CASE(
    "faults: nats-server killed and restarted mid-stream, kvidx serve resumes its durable and matches an offline "
    "apply") {
  run_nats_restarts(8, 2, 40, 2);
}
}  // TEST_SUITE("faults")

TEST_SUITE("long") {
TEST_CASE("faults long: nats-server killed and restarted 6 times mid-stream") { run_nats_restarts(32, 2, 80, 6); }
}  // TEST_SUITE("long")
