// KvidxService: the lifecycle (start, stop) and readiness of `kvidx serve`, and the stats it
// reports. The work is done by its parts (service_context.h lists them).
#include "libbus/service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "libbus/ingest.h"
#include "libbus/nats_url.h"
#include "libbus/query_server.h"
#include "libbus/service_context.h"
#include "libbus/snapshotter.h"
#include "libbus/stream_replicas.h"
#include "libcodec/stats_codec.h"
#include "libindexer/index_digest.h"

namespace kvidx::bus {

struct KvidxService::Impl {
  explicit Impl(ServiceConfig c)
      : ctx(std::move(c)), ingest(ctx), snapshots(ctx, ingest), queries(ctx, ingest, [this](std::string_view request) {
          return encode_stats_reply(stats_reply(decode_stats_request(request)));
        }) {
    ctx.metrics.gauge_callback("kvidx_ready", "1 when the service is ready for traffic (/readyz)", {},
                               [this] { return readiness().ready ? 1.0 : 0.0; });
    register_indexer_gauges(ctx.metrics, ctx.indexer);
    ctx.metrics.gauge_callback("kvidx_up", "1 while the service is alive (/healthz)", {},
                               [this] { return ctx.alive() ? 1.0 : 0.0; });
    // Constant 1, labelled with what this instance indexes: dashboards join it on `instance` to
    // group replicas by shard ("all": unsharded).
    ctx.metrics.gauge_callback("kvidx_shard_info", "1; the label says which shard this instance indexes (I/N, or all)",
                               {{"shard", ctx.config.shard ? to_string(*ctx.config.shard) : std::string("all")}},
                               [] { return 1.0; });
  }

  ServiceContext ctx;
  Ingest ingest;
  Snapshotter snapshots;
  QueryServer queries;
  std::atomic<bool> started{false};  // start() completed once (read by readiness())
  std::atomic<bool> serving{false};  // start() completed and stop() not begun
  bool stopped = false;

  BusStatus start() {
    const ServiceConfig& config = ctx.config;
    ConnectionOptions ingest_opts;
    ingest_opts.url = config.nats_url;
    ingest_opts.auth = config.nats_auth;
    ingest_opts.name = "kvidx-ingest-" + config.durable;
    auto ic = Connection::connect(ingest_opts);
    if (!ic.ok()) return ic.error();
    ctx.ingest_conn = std::move(ic).value();
    ConnectionOptions query_opts = ingest_opts;
    query_opts.name = "kvidx-query-" + config.durable;
    query_opts.send_asap = true;
    auto qc = Connection::connect(query_opts);
    if (!qc.ok()) return qc.error();
    ctx.query_conn = std::move(qc).value();
    ctx.connections_made.store(true, std::memory_order_release);

    if (config.mode == IngestMode::jetstream) {
      if (auto s = start_jetstream(); !s.ok()) return s;
    }
    if (config.serve_queries) {
      if (auto s = queries.start(); !s.ok()) return s;
    }
    if (config.mode == IngestMode::core) {
      if (auto s = ingest.start_core(); !s.ok()) return s;
    }
    started = true;
    ingest.open_local();
    serving = true;
    spdlog::info("kvidx serving: mode {}, {} lanes, prefix '{}', {}",
                 config.mode == IngestMode::jetstream ? "jetstream" : "core", ctx.indexer.lane_count(),
                 ctx.subjects.prefix(), redact_url(config.nats_url));
    return {};
  }

  // The events stream, the newest snapshot restored, then the consumer from what it covers.
  BusStatus start_jetstream() {
    const ServiceConfig& config = ctx.config;
    auto j = JetStream::create(ctx.ingest_conn);
    if (!j.ok()) return j.error();
    ctx.js.emplace(std::move(j).value());
    std::vector<std::string> stream_subjects{ctx.subjects.events_wildcard()};
    stream_subjects.insert(stream_subjects.end(), config.extra_subjects.begin(), config.extra_subjects.end());
    ctx.known_servers = ctx.ingest_conn.known_servers();
    const StreamSpec events_stream = with_replicas(
        StreamSpec{config.stream, stream_subjects, true, 0, config.stream_max_age.count(), config.stream_max_bytes},
        config.stream_replicas, ctx.known_servers);
    auto ensured = ctx.js->ensure_stream(events_stream);
    if (!ensured.ok()) return ensured.error();
    log_stream_replicas(events_stream, ensured.value(), ctx.known_servers);
    ctx.stream_replicas = ensured.value().replicas;
    if (auto s = snapshots.open(); !s.ok()) return s;
    // NOTE: the durable is re-created at every start so it delivers exactly from what the restored
    // state covers (snapshot sequence + 1, or the whole stream without a snapshot). Acks within a
    // run keep redeliveries away; across restarts the snapshot is the source of truth.
    if (auto s = ingest.note_stream_state(); !s.ok()) return s;
    if (auto s = ingest.start_jetstream(); !s.ok()) return s;
    snapshots.start_timer();
    return {};
  }

  void stop(bool final_snapshot) {
    if (stopped) return;
    stopped = true;
    serving = false;
    snapshots.stop_timer();
    // 1. stop pulling / receiving (in-process sources included)
    ingest.stop_receiving();
    // 2. drain lanes and acks
    ingest.drain_acks();
    ctx.indexer.flush();
    if (ctx.ingest_conn.valid()) ctx.ingest_conn.flush(2000);
    // 3. final snapshot
    if (final_snapshot && started && snapshots.enabled()) {
      if (auto s = snapshots.write(); !s.ok()) spdlog::warn("final snapshot failed: {}", s.error().message);
    }
    queries.stop();
    ingest.close();
    snapshots.close();
    ctx.js.reset();
    ctx.healthy = false;
    for (const auto& [kind, count] : ctx.warnings.take_suppressed()) {
      spdlog::warn("{} more '{}' warning(s) were not logged since the previous such line (see the counters)", count,
                   kind);
    }
  }

  // See Readiness (service.h). Cheap: atomics and one short lock.
  Readiness readiness() {
    Readiness r;
    r.snapshot_stale = snapshots.stale();
    if (!serving.load()) {
      r.reason = started ? "stopped" : "starting: restoring the newest snapshot and subscribing";
    } else if (!ctx.alive()) {
      r.reason = ctx.healthy.load() ? "a NATS connection is closed for good" : "indexer offline";
    } else if (!ingest.caught_up()) {
      r.reason = ingest.catching_up_reason();
    } else if (r.snapshot_stale) {
      r.reason = fmt::format("snapshot stale: the newest good snapshot is {:.1f} s old (bound {:.1f} s)",
                             snapshots.age_seconds(), snapshots.stale_bound().count() / 1000.0);
    } else {
      r.ready = true;
    }
    return r;
  }

  ServiceStats stats() {
    const ServiceCounters& c = ctx.counters;
    ServiceStats s;
    s.messages = c.messages_total->value();
    for (int k = 0; k < 3; ++k) {
      s.events_applied += c.events_by[k][0]->value();
      s.duplicates += c.events_by[k][1]->value();
    }
    s.gaps = c.gaps_total->value();
    s.missing_events = c.missing_total->value();
    s.resets = c.resets_total->value();
    s.dead_letters = c.dead_letters_total->value();
    s.dead_letters_truncated = c.dead_letters_truncated->value();
    for (const Counter* f : c.dead_letter_failures) s.dead_letter_failures += f->value();
    s.stream_limit_rejections = c.stream_limit_rejections->value();
    s.queries_rejected = queries.queries_rejected();
    s.snapshots_written = c.snapshots_total->value();
    s.snapshot_failures = c.snapshot_failures_total->value();
    s.local_batches = c.local_batches_total->value();
    ingest.fill_stats(s);
    return s;
  }

  // The index digest (libindexer/index_digest.h) and the stream position it is a cut at: the dump
  // and the sequence come from one capture under the dispatch lock (like a snapshot), so every event
  // message up to `position` is reflected and none after it.
  StatsDigest digest_of_index(DigestDetail detail) {
    StatsDigest out;
    IndexSnapshot cut;
    if (!ingest.capture(cut)) {
      out.error = "indexer offline";
      return out;
    }
    const IndexDigest digest = digest_of(cut.events);
    out.position = cut.stream_sequence;
    out.total = digest_hex(digest.total);
    out.blocks = digest.blocks;
    out.streams = digest.streams.size();
    if (detail == DigestDetail::streams) {
      out.by_stream.emplace();
      for (const StreamDigest& d : digest.streams) {
        out.by_stream->push_back(StreamDigestLine{d.stream.worker_id, d.stream.dp_rank, std::string(to_string(d.tier)),
                                                  d.blocks, digest_hex(d.digest)});
      }
    }
    return out;
  }

  // kv.admin.stats and kv.admin.replicas (libcodec/stats_codec.h).
  StatsReply stats_reply(DigestDetail digest = DigestDetail::none) {
    LaneIndexer& indexer = ctx.indexer;  // shard_sizes and get_workers are FIFO barriers (non-const)
    const ShardSizes sizes = indexer.shard_sizes();
    const ServiceStats s = stats();
    const Readiness ready = readiness();
    StatsReply r;
    r.ready = ready.ready;
    r.not_ready_reason = ready.reason;
    r.snapshot_stale = ready.snapshot_stale;
    if (snapshots.enabled()) r.snapshot_age_seconds = snapshots.age_seconds();
    r.mode = ctx.config.mode == IngestMode::jetstream ? "jetstream" : "core";
    for (const auto& [reason, count] : queries.queries_rejected_by_reason())
      r.queries_rejected_by_reason[reason] = count;
    r.snapshot_failures = s.snapshot_failures;
    r.workers = indexer.get_workers().size();
    r.streams = sizes.worker_count;
    r.blocks = sizes.block_count;
    r.nodes = sizes.node_count;
    r.blocks_pending_cleanup = sizes.blocks_pending_cleanup;
    r.lanes = indexer.lane_count();
    r.messages = s.messages;
    r.events_applied = s.events_applied;
    r.duplicates = s.duplicates;
    r.gaps = s.gaps;
    r.missing_events = s.missing_events;
    r.resets = s.resets;
    r.dead_letters = s.dead_letters;
    r.dead_letters_truncated = s.dead_letters_truncated;
    r.dead_letter_failures = s.dead_letter_failures;
    r.stream_limit_rejections = s.stream_limit_rejections;
    r.max_streams = ctx.config.max_streams;
    r.queries_rejected = s.queries_rejected;
    r.dispatched_sequence = s.dispatched_sequence;
    r.acked_sequence = s.acked_sequence;
    r.restored_sequence = s.restored_sequence;
    r.history_trimmed = s.history_trimmed;
    r.consumer_resets = ctx.counters.consumer_resets_total->value();
    r.stream_holes = ctx.counters.stream_holes_total->value();
    r.snapshots_written = s.snapshots_written;
    r.local_batches = s.local_batches;
    r.apply_parent_not_found = indexer.metrics().applied_with(ApplyStatus::parent_not_found);
    r.apply_block_not_found = indexer.metrics().applied_with(ApplyStatus::block_not_found);
    r.apply_invalid = indexer.metrics().applied_with(ApplyStatus::invalid);
    r.active_requests = ctx.load.live_requests();
    r.replica = ctx.config.durable;
    r.restored_from = snapshots.restored_from();
    if (ctx.config.shard) r.shard = to_string(*ctx.config.shard);
    r.stream_replicas = static_cast<std::uint64_t>(std::max(0, ctx.stream_replicas.load()));
    r.known_servers = ctx.known_servers;
    // Every tier, device included; streams, blocks and nodes above are the device tree's.
    const LaneIndexerMetrics applied = indexer.metrics();
    for (const StorageTier tier : kStorageTiers) {
      const std::size_t t = tier_index(tier);
      r.tiers[std::string(to_string(tier))] = TierStats{sizes.streams_by_tier[t], sizes.blocks_by_tier[t],
                                                        sizes.nodes_by_tier[t], applied.applied_by_tier[t]};
      r.tier_weights[std::string(to_string(tier))] = ctx.config.tier_weights.of(tier);
    }
    if (digest != DigestDetail::none) r.digest = digest_of_index(digest);
    return r;
  }
};

KvidxService::KvidxService(ServiceConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

KvidxService::~KvidxService() {
  if (impl_) impl_->stop(false);
}

BusStatus KvidxService::start() { return impl_->start(); }
void KvidxService::stop(bool final_snapshot) { impl_->stop(final_snapshot); }
BusStatus KvidxService::snapshot_now() { return impl_->snapshots.write(); }
BusStatus KvidxService::ingest_local_events(std::span<const RouterEvent> events) {
  return impl_->ingest.ingest_local(events);
}

bool KvidxService::wait_for_acked_sequence(std::uint64_t sequence, std::chrono::milliseconds timeout) {
  return impl_->ingest.wait_for_acked_sequence(sequence, timeout);
}

ServiceStats KvidxService::stats() const { return impl_->stats(); }
std::string KvidxService::render_metrics() const { return impl_->ctx.metrics.render(); }
bool KvidxService::healthy() const { return impl_->ctx.alive(); }
Readiness KvidxService::readiness() const { return impl_->readiness(); }
MetricsRegistry& KvidxService::metrics() { return impl_->ctx.metrics; }
LaneIndexer& KvidxService::indexer() { return impl_->ctx.indexer; }
ActiveLoad& KvidxService::active_load() { return impl_->ctx.load; }

}  // namespace kvidx::bus
