#include "bench/app/e2e_queries.h"

#include <atomic>
#include <random>
#include <stdexcept>
#include <thread>

#include "libbus/nats_connection.h"
#include "libbus/service.h"
#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"
#include "libindexer/lanes/lane_indexer.h"

namespace kvidx::bench {
namespace {

constexpr std::size_t kStreams = 128;  // 64 workers x 2 ranks
constexpr std::size_t kChains = 4096;  // chain c is held by streams c % 64 and c % 64 + 64
constexpr std::uint64_t kBlocks = 4;

LocalBlockHash local_hash(std::size_t chain, std::uint64_t block) {
  return LocalBlockHash{(chain * 16 + block + 1) * 1000003 + block};
}

bus::Connection connect_to(const testing::NatsServer& server) {
  bus::ConnectionOptions options;
  options.url = server.url();
  options.send_asap = true;  // a router's requests go out at once
  auto conn = bus::Connection::connect(options);
  if (!conn.ok()) throw std::runtime_error("cannot connect to " + server.url() + ": " + conn.error().message);
  return std::move(conn).value();
}

// Every chain stored by its two streams, as plain Stored events; returns the events published.
std::size_t fill(const testing::NatsServer& server) {
  bus::Connection pub = connect_to(server);
  std::vector<std::uint64_t> next_id(kStreams, 0);
  std::size_t events = 0;
  for (std::size_t chain = 0; chain < kChains; ++chain) {
    for (const std::size_t stream : {chain % 64, chain % 64 + 64}) {
      RouterEvent e;
      e.worker_id = stream % 64 + 1;
      e.event.dp_rank = static_cast<DpRank>(stream / 64);
      e.event.event_id = next_id[stream]++;
      KvCacheStoreData data;
      for (std::uint64_t b = 0; b < kBlocks; ++b) {
        data.blocks.push_back(StoredBlock{{(chain * 16 + b + 1) * 7919}, local_hash(chain, b)});
      }
      e.event.data = data;
      if (!pub.publish(bus::Subjects().events(e.worker_id), encode_router_event(e)).ok()) {
        throw std::runtime_error("publish failed");
      }
      ++events;
    }
  }
  if (!pub.flush(60000).ok()) throw std::runtime_error("flush failed");
  return events;
}

}  // namespace

QueryFigures measure_score_queries(const testing::NatsServer& server, std::size_t lanes, std::size_t requesters,
                                   double seconds) {
  bus::ServiceConfig config;
  config.nats_url = server.url();
  config.mode = bus::IngestMode::core;
  config.lanes = lanes;
  config.durable = "bench-queries";
  config.snapshot_interval = std::chrono::milliseconds(0);
  bus::KvidxService service(config);
  if (!service.start().ok()) throw std::runtime_error("KvidxService (queries) did not start");
  const std::size_t events = fill(server);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (service.stats().events_applied < events) {
    if (Clock::now() > deadline) throw std::runtime_error("the query bench's events were not applied in 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (service.indexer().flush() != IndexerStatus::ok) throw std::runtime_error("indexer offline");

  std::atomic<bool> failed{false};
  std::vector<std::vector<std::uint32_t>> latencies(requesters);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (std::size_t r = 0; r < requesters; ++r) {
    threads.emplace_back([&, r] {
      try {
        bus::Connection client = connect_to(server);
        std::mt19937_64 rng(r + 1);
        const std::string subject = bus::Subjects().query_scores();
        while (Clock::now() < end && !failed.load()) {
          const std::size_t chain = rng() % kChains;
          ScoreRequest request;
          for (std::uint64_t b = 0; b < kBlocks; ++b) request.local_hashes.push_back(local_hash(chain, b));
          const auto t0 = Clock::now();
          auto reply = client.request(subject, encode_score_request(request), 5000);
          if (!reply.ok()) throw std::runtime_error(reply.error().message);
          auto decoded = decode_score_reply(reply.value().data());
          // Every chain is held whole by its two streams: a reply with fewer is a wrong answer.
          if (!decoded.ok() || decoded.value().scores.size() != 2) throw std::runtime_error("unexpected score reply");
          latencies[r].push_back(static_cast<std::uint32_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kvidx-bench e2e queries: %s\n", e.what());
        failed = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = seconds_since(start);
  service.stop(false);
  if (failed) throw std::runtime_error("a score query failed");
  std::vector<std::uint32_t> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  QueryFigures out;
  out.queries_per_second = static_cast<double>(all.size()) / elapsed;
  out.latency = percentiles(all);
  return out;
}

}  // namespace kvidx::bench
