// kvidx-bench e2e: the end-to-end ingest rate of KvidxService over a local nats-server (spawned on
// a free 127.0.0.1 port with a temp store), in core and JetStream mode, beside a raw nats.c
// consumer of the same messages in the same run:
//   core       raw: a subscriber that only counts; kvidx: published -> applied by the lanes.
//   jetstream  the stream is filled first; raw: a pull consumer fetching batches of 1000 with one
//              cumulative ack each; kvidx: service start -> every message applied and acked.
// Each cell is the median of --repeats runs; rates are events/s (messages/s x events per message).
// Two rows per batch size give the ceilings without NATS: decode on one thread, lanes applying.
// Then score queries over NATS (e2e_queries.h): queries/s and latency with 1 and --query-requesters
// concurrent requesters (one replica's capacity, for sizing).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "bench/app/commands.h"
#include "bench/app/e2e_queries.h"
#include "bench/common/report.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/nats_pull_consumer.h"
#include "libbus/service.h"
#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/nats_server.h"

namespace kvidx::bench {
namespace {

using bus::Connection;
using Messages = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kStream = "KV_EVENTS";

// `events` Stored events of 4 blocks over 128 streams (64 workers x 2 ranks), `per_message` per
// message; each stream cycles through 512 chains, so the tree reaches a steady size.
Messages make_messages(std::size_t events, std::size_t per_message) {
  Messages out;
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
        d.blocks.push_back(StoredBlock{{h * 1000003 + b}, {h}});
      }
      e.event.data = d;
      batch.push_back(e);
    }
    out.emplace_back(bus::Subjects().events(s / 2 + 1),
                     per_message == 1 ? encode_router_event(batch[0]) : encode_router_events(batch));
  }
  return out;
}

Connection connect(const testing::NatsServer& server) {
  bus::ConnectionOptions options;
  options.url = server.url();
  auto conn = Connection::connect(options);
  if (!conn.ok()) throw std::runtime_error("cannot connect to " + server.url());
  return std::move(conn).value();
}

void publish_all(Connection& pub, const Messages& msgs) {
  for (const auto& [subject, body] : msgs) {
    if (!pub.publish(subject, body).ok()) throw std::runtime_error("publish failed");
  }
  if (!pub.flush(60000).ok()) throw std::runtime_error("flush failed");
}

// CPU seconds (user + system) this process has used so far, all threads.
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// A rate (messages/s) and the process's CPU seconds while it was measured.
struct Measured {
  double rate = 0;
  double cpu = 0;
};

// Messages/s.
Measured raw_core_rate(const testing::NatsServer& server, const Messages& msgs) {
  Connection sub_conn = connect(server);
  Connection pub = connect(server);
  std::atomic<std::size_t> got{0};
  auto sub = sub_conn.subscribe(bus::Subjects().events_wildcard(),
                                [&](bus::Message) { got.fetch_add(1, std::memory_order_relaxed); });
  if (!sub.ok() || !sub.value().set_unlimited_pending().ok() || !sub_conn.flush().ok()) {
    throw std::runtime_error("raw subscribe failed");
  }
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  publish_all(pub, msgs);
  while (got.load() < msgs.size()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return {static_cast<double>(msgs.size()) / seconds_since(t0), process_cpu_seconds() - cpu0};
}

bus::ServiceConfig service_config(const testing::NatsServer& server, bus::IngestMode mode, std::size_t lanes) {
  bus::ServiceConfig c;
  c.nats_url = server.url();
  c.mode = mode;
  c.serve_queries = false;
  c.lanes = lanes;
  c.durable = "bench";
  c.snapshot_interval = std::chrono::milliseconds(0);
  return c;
}

// Messages/s.
Measured kvidx_core_rate(const testing::NatsServer& server, const Messages& msgs, std::size_t events,
                         std::size_t lanes) {
  bus::KvidxService service(service_config(server, bus::IngestMode::core, lanes));
  if (!service.start().ok()) throw std::runtime_error("KvidxService (core) did not start");
  Connection pub = connect(server);
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  publish_all(pub, msgs);
  while (service.stats().events_applied < events) std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (service.indexer().flush() != IndexerStatus::ok) throw std::runtime_error("indexer offline");
  const double rate = static_cast<double>(msgs.size()) / seconds_since(t0);
  const double cpu = process_cpu_seconds() - cpu0;
  service.stop(false);
  return {rate, cpu};
}

// Creates the stream and stores every message in it; returns the last stream sequence.
std::uint64_t fill_stream(const testing::NatsServer& server, const Messages& msgs) {
  Connection conn = connect(server);
  auto js = bus::JetStream::create(conn);
  if (!js.ok() || !js.value().ensure_stream({kStream, {bus::Subjects().events_wildcard()}, true, 0, 0}).ok()) {
    throw std::runtime_error("cannot create the stream");
  }
  for (const auto& [subject, body] : msgs) {
    if (!js.value().publish_async(subject, body).ok()) throw std::runtime_error("JetStream publish failed");
  }
  if (!js.value().publish_async_complete(120000).ok()) throw std::runtime_error("JetStream publish incomplete");
  return msgs.size();
}

// Messages/s of a pull consumer that does nothing but fetch and ack.
Measured raw_jetstream_rate(const testing::NatsServer& server, std::size_t count, const std::string& durable) {
  Connection conn = connect(server);
  auto js = bus::JetStream::create(conn);
  if (!js.ok()) throw std::runtime_error("JetStream context failed");
  bus::ConsumerSpec spec;
  spec.durable = durable;
  spec.max_ack_pending = 200000;
  if (!js.value().ensure_consumer(kStream, spec).ok()) throw std::runtime_error("raw consumer failed");
  auto pull = bus::PullConsumer::bind(conn, kStream, durable);
  if (!pull.ok()) throw std::runtime_error("raw pull subscribe failed");
  std::size_t got = 0;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  while (got < count) {
    auto batch = pull.value().fetch(1000, 2000);
    if (!batch.ok() || batch.value().empty()) continue;
    got += batch.value().size();
    if (!bus::jetstream_ack(conn, batch.value().back()).ok())
      throw std::runtime_error("raw ack failed");  // cumulative (AckAll)
  }
  return {static_cast<double>(count) / seconds_since(t0), process_cpu_seconds() - cpu0};
}

// Messages/s from service start until the last message is applied and acknowledged.
Measured kvidx_jetstream_rate(const testing::NatsServer& server, std::uint64_t last_sequence, std::size_t events,
                              std::size_t lanes, const std::string& durable) {
  auto config = service_config(server, bus::IngestMode::jetstream, lanes);
  config.durable = durable;
  bus::KvidxService service(config);
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  if (!service.start().ok()) throw std::runtime_error("KvidxService (JetStream) did not start");
  if (!service.wait_for_acked_sequence(last_sequence, std::chrono::seconds(600))) {
    throw std::runtime_error("KvidxService did not ack the whole stream");
  }
  const double rate = static_cast<double>(last_sequence) / seconds_since(t0);
  const double cpu = process_cpu_seconds() - cpu0;
  if (service.stats().events_applied != events) throw std::runtime_error("KvidxService applied a different count");
  service.stop(false);
  return {rate, cpu};
}

// One message's events; a message that does not decode ends the bench.
std::vector<RouterEvent> decode_message(const std::string& body) {
  auto batch = decode_router_events(body);
  if (!batch.ok()) throw std::runtime_error("bench message does not decode: " + batch.error().message());
  return std::move(batch).value();
}

// Events/s of decoding every message on one thread (no NATS, no tree). Each message's events are
// dropped before the next message is decoded, as the service's lanes free what they applied:
// keeping them all would also time the kernel handing out fresh pages for them.
double decode_rate(const Messages& msgs, std::size_t events) {
  std::size_t seen = 0;
  const auto t0 = Clock::now();
  for (const auto& [subject, body] : msgs) seen += decode_message(body).size();
  const double seconds = seconds_since(t0);
  if (seen != events) throw std::runtime_error("decoded a different number of events");
  return static_cast<double>(events) / seconds;
}

// Every message's events, decoded (outside any clock).
std::vector<RouterEvent> decode_all(const Messages& msgs, std::size_t events) {
  std::vector<RouterEvent> decoded;
  decoded.reserve(events);
  for (const auto& [subject, body] : msgs) {
    for (RouterEvent& e : decode_message(body)) decoded.push_back(std::move(e));
  }
  return decoded;
}

// Events/s of a LaneIndexer applying already decoded events (handed over in message-sized groups).
double apply_rate(std::vector<RouterEvent> decoded, std::size_t per_message, std::size_t lanes) {
  LaneIndexer indexer(lanes);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < decoded.size(); i += per_message) {
    const std::size_t n = std::min(per_message, decoded.size() - i);
    if (indexer.enqueue_events(std::span<RouterEvent>(decoded).subspan(i, n)) != IndexerStatus::ok) {
      throw std::runtime_error("indexer offline");
    }
  }
  if (indexer.flush() != IndexerStatus::ok) throw std::runtime_error("indexer offline");
  return static_cast<double>(decoded.size()) / seconds_since(t0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int run_e2e(const E2eArgs& args) {
  try {
    Report report("e2e");
    report.extra()["workload"] = {{"events", args.events}, {"lanes", args.lanes}, {"repeats", args.repeats}};
    for (const std::size_t per_message : args.per_message) {
      const auto msgs = make_messages(args.events, std::max<std::size_t>(1, per_message));
      const double scale = static_cast<double>(per_message);
      std::vector<double> raw_core, core, raw_js, js, decode, apply;
      std::vector<double> raw_core_cpu, core_cpu, raw_js_cpu, js_cpu;  // CPU seconds per million events
      const std::vector<RouterEvent> decoded = decode_all(msgs, args.events);
      for (std::size_t run = 0; run < args.repeats; ++run) {
        decode.push_back(decode_rate(msgs, args.events));
        apply.push_back(apply_rate(decoded, per_message, args.lanes));
        // A fresh server per run: the stream, consumers and page cache start equal.
        testing::NatsServer server;
        std::printf("## e2e run %zu/%zu: %zu events in %zu messages (%zu per message), %zu lanes; load %s\n", run + 1,
                    args.repeats, args.events, msgs.size(), per_message, args.lanes, load_average().c_str());
        std::fflush(stdout);
        const double per_million = 1e6 / static_cast<double>(args.events);
        const Measured rc = raw_core_rate(server, msgs);
        const Measured kc = kvidx_core_rate(server, msgs, args.events, args.lanes);
        const std::uint64_t last = fill_stream(server, msgs);
        const Measured rj = raw_jetstream_rate(server, msgs.size(), "raw");
        const Measured kj = kvidx_jetstream_rate(server, last, args.events, args.lanes, "kvidx");
        raw_core.push_back(rc.rate * scale);
        core.push_back(kc.rate * scale);
        raw_js.push_back(rj.rate * scale);
        js.push_back(kj.rate * scale);
        raw_core_cpu.push_back(rc.cpu * per_million);
        core_cpu.push_back(kc.cpu * per_million);
        raw_js_cpu.push_back(rj.cpu * per_million);
        js_cpu.push_back(kj.cpu * per_million);
      }
      const std::string batch = std::to_string(per_message) + "/msg";
      report.add(Row{"e2e ingest, core NATS, " + batch,
                     "events/s",
                     true,
                     median(core),
                     {{"raw nats.c subscriber", median(raw_core)}}});
      report.add(Row{"e2e ingest, JetStream, " + batch,
                     "events/s",
                     true,
                     median(js),
                     {{"raw nats.c pull consumer", median(raw_js)}}});
      // CPU (getrusage, the whole bench process) per million events: JetStream: only the consumer
      // runs in the process (the stream is filled before); core: the publisher runs in it too, for
      // the raw subscriber and for kvidx alike.
      report.add(Row{"CPU per million events, JetStream, " + batch,
                     "s",
                     false,
                     median(js_cpu),
                     {{"raw nats.c pull consumer", median(raw_js_cpu)}}});
      report.add(Row{"CPU per million events incl. publisher, core NATS, " + batch,
                     "s",
                     false,
                     median(core_cpu),
                     {{"raw nats.c subscriber", median(raw_core_cpu)}}});
      // The ceilings without NATS: the codec on one thread, the lanes on their own.
      report.add(Row{"offline decode (1 thread), " + batch, "events/s", true, median(decode), {}});
      report.add(Row{
          "offline apply (" + std::to_string(args.lanes) + " lanes), " + batch, "events/s", true, median(apply), {}});
    }
    if (args.query_seconds > 0) {
      std::vector<std::size_t> requester_counts{1};
      if (args.query_requesters > 1) requester_counts.push_back(args.query_requesters);
      for (const std::size_t requesters : requester_counts) {
        std::vector<double> rate, p50, p99;
        for (std::size_t run = 0; run < args.repeats; ++run) {
          testing::NatsServer server;
          std::printf("## e2e score queries run %zu/%zu: %zu requester(s), %.1f s; load %s\n", run + 1, args.repeats,
                      requesters, args.query_seconds, load_average().c_str());
          std::fflush(stdout);
          const QueryFigures q = measure_score_queries(server, args.lanes, requesters, args.query_seconds);
          rate.push_back(q.queries_per_second);
          p50.push_back(q.latency.p50_us);
          p99.push_back(q.latency.p99_us);
        }
        const std::string who = std::to_string(requesters) + " requester" + (requesters == 1 ? "" : "s");
        report.add(Row{"score queries over NATS, " + who, "queries/s", true, median(rate), {}});
        report.add(Row{"score query round trip over NATS, " + who + ", p50", "µs", false, median(p50), {}});
        report.add(Row{"score query round trip over NATS, " + who + ", p99", "µs", false, median(p99), {}});
      }
    }
    report.print();
    return report.write_json(args.common.json_dir) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvidx-bench e2e: %s\n", e.what());
    return 1;
  }
}

}  // namespace kvidx::bench
