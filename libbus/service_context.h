// What the parts of `kvidx serve` share (internal to libbus: apps and tests include service.h only).
// The service (service.cpp: lifecycle and readiness) owns one ServiceContext and hands it to its
// parts, each in its own file with one job:
//   ingest.h          events from NATS (core, JetStream) and in-process sources into the lanes
//   snapshotter.h     periodic / on-demand / final snapshots, restore at start, staleness
//   query_server.h    request/reply: scores, admin (stats, workers, remove_worker, dump),
//                     routing decisions and request lifecycles
//   service_metrics.h counters and the indexer's gauges
#pragma once

#include <atomic>
#include <optional>

#include "libbus/log_rate_limiter.h"
#include "libbus/metrics.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/service.h"
#include "libbus/service_metrics.h"
#include "libbus/subjects.h"
#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/load/active_load.h"

namespace kvidx::bus {

struct ServiceContext {
  explicit ServiceContext(ServiceConfig c)
      : config(std::move(c)),
        subjects(config.subject_prefix, config.shard),
        indexer(LaneIndexerOptions{config.lanes == 0 ? 1 : config.lanes, config.approximate}),
        counters(metrics) {}

  // Liveness. A NATS connection closed for good (reconnects exhausted, or closed by the server for
  // a protocol violation) never comes back by itself: the process must be restarted.
  bool alive() const {
    if (!healthy.load()) return false;
    if (!connections_made.load(std::memory_order_acquire)) return true;
    return !ingest_conn.closed() && !query_conn.closed();
  }

  ServiceConfig config;
  Subjects subjects;
  LaneIndexer indexer;
  ActiveLoad load;
  MetricsRegistry metrics;
  ServiceCounters counters;
  // Warnings about rejected input, per kind: counters stay exact, the log does not grow with the
  // input rate (first occurrence, then one line per 10 s per kind with the count left out).
  LogRateLimiter warnings;

  Connection ingest_conn;  // fetch/core subscription, acks, dead letters, snapshots
  Connection query_conn;   // responders (send_asap)
  std::optional<JetStream> js;
  // Servers the ingest connection knew at start (stream_replicas.h), and the events stream's
  // replica count after ensure_stream (0 before / in core mode).
  std::size_t known_servers = 0;
  std::atomic<int> stream_replicas{0};
  // Liveness: true from construction; false once the indexer went offline or stop() ran (and,
  // see alive(), while a NATS connection is closed for good).
  std::atomic<bool> healthy{true};
  std::atomic<bool> connections_made{false};  // release: ingest_conn / query_conn are set
};

}  // namespace kvidx::bus
