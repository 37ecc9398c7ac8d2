// kvidx-bench e2e: events published to a local nats-server (spawned on a free 127.0.0.1 port with
// a temp store) and applied by KvidxService (core ingest, decode, sequencer, lanes), beside a raw
// nats.c subscriber that only counts the same messages, in the same run.
#include <atomic>
#include <cstdio>
#include <thread>

#include "bench/app/commands.h"
#include "bench/common/report.h"
#include "libbus/codec/event_codec.h"
#include "libbus/nats_connection.h"
#include "libbus/service.h"
#include "libindexer/lane_indexer.h"
#include "tests/support/nats_server.h"

namespace kvidx::bench {
namespace {

using bus::Connection;

// `events` Stored events of 4 blocks over 128 streams (64 workers x 2 ranks).
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

Connection connect(const testing::NatsServer& server) {
  auto conn = Connection::connect({server.url()});
  if (!conn.ok()) throw std::runtime_error("cannot connect to " + server.url());
  return std::move(conn).value();
}

void publish_all(Connection& pub, const std::vector<std::pair<std::string, std::string>>& msgs) {
  for (const auto& [subject, body] : msgs) {
    if (!pub.publish(subject, body).ok()) throw std::runtime_error("publish failed");
  }
  if (!pub.flush(60000).ok()) throw std::runtime_error("flush failed");
}

double raw_rate(const testing::NatsServer& server, const std::vector<std::pair<std::string, std::string>>& msgs) {
  Connection sub_conn = connect(server);
  Connection pub = connect(server);
  std::atomic<std::size_t> got{0};
  auto sub = sub_conn.subscribe("kv.events.>", [&](bus::Message) { got.fetch_add(1, std::memory_order_relaxed); });
  if (!sub.ok() || !sub.value().set_unlimited_pending().ok() || !sub_conn.flush().ok()) {
    throw std::runtime_error("raw subscribe failed");
  }
  const auto t0 = Clock::now();
  publish_all(pub, msgs);
  while (got.load() < msgs.size()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return static_cast<double>(msgs.size()) / seconds_since(t0);
}

double kvidx_rate(const testing::NatsServer& server, const std::vector<std::pair<std::string, std::string>>& msgs,
                  std::size_t events, std::size_t lanes) {
  bus::ServiceConfig c;
  c.nats_url = server.url();
  c.mode = bus::IngestMode::core;
  c.serve_queries = false;
  c.lanes = lanes;
  bus::KvidxService service(c);
  if (!service.start().ok()) throw std::runtime_error("KvidxService did not start");
  Connection pub = connect(server);
  const auto t0 = Clock::now();
  publish_all(pub, msgs);
  while (service.stats().events_applied < events) std::this_thread::sleep_for(std::chrono::microseconds(200));
  service.indexer().flush();
  const double rate = static_cast<double>(msgs.size()) / seconds_since(t0);
  service.stop(false);
  return rate;
}

}  // namespace

int run_e2e(const E2eArgs& args) {
  try {
    testing::NatsServer server;
    const auto msgs = make_messages(args.events, std::max<std::size_t>(1, args.per_message));
    std::printf("## e2e: %zu events in %zu messages (%zu per message) over nats-server %s, %zu lanes; load %s\n",
                args.events, msgs.size(), args.per_message, server.url().c_str(), args.lanes, load_average().c_str());
    std::fflush(stdout);
    const double raw = raw_rate(server, msgs);
    const double kvidx = kvidx_rate(server, msgs, args.events, args.lanes);
    Report report("e2e");
    report.extra()["workload"] = {{"events", args.events}, {"messages", msgs.size()}, {"per_message", args.per_message},
                                  {"lanes", args.lanes}};
    report.add(Row{"e2e published -> applied (core NATS)", "msgs/s", true, kvidx, {{"raw nats.c subscriber", raw}}});
    report.print();
    return report.write_json(args.common.json_dir) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvidx-bench e2e: %s\n", e.what());
    return 1;
  }
}

}  // namespace kvidx::bench
