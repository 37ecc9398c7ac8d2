// KvidxService: the `kvidx serve` runtime. Consumes RouterEvents from NATS into a LaneIndexer,
// answers queries over request/reply, writes and restores snapshots. nats.c, JSON and Asio stay
// in the .cpp files (pimpl: the parts are listed in service_context.h), so apps and tests include
// only this, and it includes no nats.c header (errors are bus_error.h's BusError).
//
// Data path (one event; ingest.h, ingest_jetstream.cpp):
//   JetStream: fetch thread (only pulls, so the server keeps streaming) -> bounded hand-off of
//   fetched batches -> dispatch thread: decode (event_codec fast path) and subject/payload worker
//   check outside the dispatch lock (else dead letter) -> under the lock, for the whole batch:
//   EventIntake (libindexer/intake/: duplicate skip / gap count / restart reset; the same rules
//   offline replay uses) -> LaneIndexer::enqueue_events
//   -> lanes apply -> the acker thread's flush() barrier (one per acker cycle, covering every
//   batch queued since the last) -> cumulative AckAll of the newest batch's last message. So an
//   acknowledged event has always been applied; a crash before the ack only causes a
//   redelivery, which the sequencer skips as a duplicate.
//   Core: the subscription's delivery thread decodes, and hands events to the lanes in bursts
//   (when no more messages are pending, or every 1024 events), so lanes are not woken per event.
// Backpressure (JetStream): at most `max_inflight_events` dispatched-but-unacked events (plus
// fetched-not-yet-dispatched messages); when reached the fetch thread stops pulling until the
// acker catches up. Nothing is dropped.
// Restart: the newest snapshot (tree + watermarks + stream sequence S) is replayed into the lanes
// before any fetch, and the durable is re-created to deliver from S + 1.
// Worker removal (kv.admin.remove_worker) is a plain subscription on every replica (queries and
// the other admin subjects use the queue group): each replica removes the worker from its own
// index and replies; the requester takes the first reply. A replica that is not running at that
// moment does not see the removal (its snapshot and the stream still hold the worker's blocks);
// making removal a record in the events stream would cover that case too.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "libbus/bus_error.h"
#include "libbus/nats_auth.h"
#include "libbus/shard_spec.h"
#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"
#include "libindexer/lanes/prune_config.h"

namespace kvidx {
class LaneIndexer;
class ActiveLoad;
}  // namespace kvidx

namespace kvidx::bus {

class MetricsRegistry;

enum class IngestMode : std::uint8_t { jetstream, core };

struct ServiceConfig {
  std::string nats_url = "nats://127.0.0.1:4222";  // one URL or a comma-separated list
  NatsAuth nats_auth;                              // credentials and TLS for both connections
  IngestMode mode = IngestMode::jetstream;
  std::size_t lanes = 4;
  std::string subject_prefix = "kv";
  // Extra event subjects/wildcards (e.g. Dynamo's layout); the worker id comes from the payload.
  std::vector<std::string> extra_subjects;
  std::string stream = "KV_EVENTS";
  std::string durable = "kvidx";  // also names this service's snapshots; one per replica
  std::string snapshot_stream = "KV_SNAPSHOTS";
  // Replicas of the events and snapshot streams on a JetStream cluster (stream_replicas.h);
  // 0: automatic (3 from 3 known servers, else 1; an existing stream keeps its count).
  int stream_replicas = 0;
  // Retention of the events stream (0: unlimited, the stream grows forever). Applied to the
  // stream at every start (an existing stream is updated). The server then discards the oldest
  // messages by age / size. Safe as long as every replica's newest snapshot covers what is
  // discarded: keep max_age well above snapshot_interval (and the snapshot stream healthy). A
  // replica that starts without a snapshot covering the discarded part (a new replica, or one down
  // longer than max_age) can only rebuild from what is left: it logs the trimmed history and counts
  // it in stats().history_trimmed; workers' later events then repair its view of them.
  std::chrono::milliseconds stream_max_age{0};
  std::int64_t stream_max_bytes = 0;
  std::chrono::milliseconds snapshot_interval{30000};  // 0: only on demand and at shutdown
  // Readiness turns false ("snapshot stale") while the newest good snapshot is older than this:
  // the snapshot written last by this process, or its start before the first one. 0: the default,
  // max(3 x snapshot_interval, 60 s). Not checked when snapshot_interval is 0.
  std::chrono::milliseconds snapshot_stale_after{0};
  bool restore_snapshot = true;
  int fetch_batch = 1000;
  std::size_t max_inflight_events = 1u << 17;
  bool clear_on_gap = false;  // re-sync: clear a stream's blocks when a gap is seen
  bool serve_queries = true;
  DecodeLimits limits;       // event messages: bytes, blocks per event, batch size, nesting
  QueryLimits query_limits;  // kv.query.scores requests: bytes, hashes (query length), nesting
  // Distinct (worker, rank) streams (0: unlimited). An event message that would add streams past
  // it is dead-lettered whole ("stream limit reached: ..."); a removed worker frees its streams'
  // places. Each stream costs about 1 KB of index state, so the default caps that at ~1 GB while
  // staying far above real fleets (10^4 workers x 16 ranks = 1.6 x 10^5 streams).
  std::size_t max_streams = 1'000'000;
  // Set: approximate mode. Routing decisions on <prefix>.routing.decisions are indexed as if the
  // worker had reported the blocks, with a TTL and a size cap (PruneConfig).
  std::optional<PruneConfig> approximate;
  // Weights of the storage tiers in a score reply's combined_scores (libindexer/tier_scores.h).
  TierWeights tier_weights;
  // Set: this instance is shard I of N (shard_spec.h). It reads only <prefix>.events.I.* (the
  // server's subject mapping routes each worker there), answers on <prefix>.shard.I.* (the merging
  // front answers <prefix>.query.scores), writes its snapshots under its shard's layout and refuses
  // to restore another shard's. Not with extra_subjects (their worker id is only in the payload).
  std::optional<ShardSpec> shard;
};

// Counters since start (also exported as Prometheus metrics).
struct ServiceStats {
  std::uint64_t messages = 0;        // event messages received
  std::uint64_t events_applied = 0;  // handed to lanes
  std::uint64_t duplicates = 0;
  std::uint64_t gaps = 0;
  std::uint64_t missing_events = 0;
  std::uint64_t resets = 0;
  std::uint64_t dead_letters = 0;             // published on the dead-letter subject
  std::uint64_t dead_letters_truncated = 0;   // of those, body cut to fit the server's max_payload
  std::uint64_t dead_letter_failures = 0;     // rejected messages whose dead letter could not be published
  std::uint64_t stream_limit_rejections = 0;  // event messages refused by max_streams (also dead letters)
  std::uint64_t queries_rejected = 0;         // score queries answered with bad_request
  std::uint64_t dispatched_sequence = 0;      // JetStream: last stream sequence handed to lanes
  std::uint64_t acked_sequence = 0;           // JetStream: last stream sequence acknowledged (applied)
  std::uint64_t snapshots_written = 0;
  std::uint64_t snapshot_failures = 0;  // snapshot writes that failed (periodic, on demand, final)
  std::uint64_t restored_sequence = 0;  // snapshot sequence restored at start (0: none)
  // Messages of the events stream this replica needed but retention had already discarded at
  // start (stream first sequence - restored sequence - 1, when positive).
  std::uint64_t history_trimmed = 0;
  std::int64_t core_dropped = 0;    // core mode: messages the client dropped
  std::uint64_t local_batches = 0;  // batches from in-process sources (ingest_local_events)
};

// Whether the service can take traffic (/readyz): the newest snapshot is restored, the consumer has
// applied and acknowledged the events stream up to its end as it was at start (JetStream; core mode:
// once subscribed), the indexer is online and snapshots are not stale. Liveness (healthy()) is
// separate: a service catching up or with failing snapshots is alive.
struct Readiness {
  bool ready = false;
  std::string reason;  // why not, one line (empty when ready)
  bool snapshot_stale = false;
};

class KvidxService {
 public:
  explicit KvidxService(ServiceConfig config);
  // Abrupt stop (no final snapshot, like a crash as far as the bus is concerned).
  ~KvidxService();
  KvidxService(const KvidxService&) = delete;
  KvidxService& operator=(const KvidxService&) = delete;

  // Connects, restores the newest snapshot, subscribes and starts ingest and queries.
  BusStatus start();
  // Graceful: stop pulling, drain lanes and acks, optional final snapshot, close. Idempotent.
  void stop(bool final_snapshot = true);
  // Writes a snapshot now (JetStream mode only).
  BusStatus snapshot_now();
  // Blocks until every event message with stream sequence <= `sequence` is applied and acked.
  bool wait_for_acked_sequence(std::uint64_t sequence, std::chrono::milliseconds timeout);

  // Events from an in-process source (an embedded ZMQ bridge: bridge/service_event_sink.h), already
  // decoded, one source batch per call, in the source's order. They take the same path as the
  // events of a NATS message after decoding: per-(worker, rank) event_id sequencing (duplicates
  // skipped, gaps counted, restarts cleared, clear_on_gap), the lanes, the event counters, stats,
  // /metrics and snapshots (their watermarks included). Nothing is acknowledged: they are not in
  // the events stream. Thread-safe; callable between start() and stop(), an error otherwise (and
  // after stop() began: no event is taken once the lanes are being drained).
  BusStatus ingest_local_events(std::span<const RouterEvent> events);

  ServiceStats stats() const;
  std::string render_metrics() const;
  // Liveness: false only once the indexer went offline (a lane failed) or the service stopped.
  bool healthy() const;
  Readiness readiness() const;
  // The registry /metrics renders, for parts living beside the service (the HTTP server).
  MetricsRegistry& metrics();

  LaneIndexer& indexer();
  ActiveLoad& active_load();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvidx::bus
