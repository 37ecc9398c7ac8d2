#include "libbus/service_metrics.h"

#include <string>

#include "libindexer/lanes/lane_indexer.h"

namespace kvidx::bus {
namespace {

const char* const kKinds[] = {"stored", "removed", "cleared"};  // EventKind order

}  // namespace

ServiceCounters::ServiceCounters(MetricsRegistry& metrics) {
  const char* results[] = {"applied", "duplicate", "rejected"};
  for (int k = 0; k < 3; ++k) {
    for (int r = 0; r < 3; ++r) {
      events_by[k][r] = &metrics.counter("kvidx_events_total", "Router events by type and result",
                                         {{"type", kKinds[k]}, {"result", results[r]}});
    }
  }
  messages_total = &metrics.counter("kvidx_event_messages_total", "Event messages received from NATS");
  gaps_total = &metrics.counter("kvidx_event_gaps_total", "event_id gaps seen (per occurrence)");
  missing_total = &metrics.counter("kvidx_events_missing_total", "Events skipped over by gaps");
  resets_total = &metrics.counter("kvidx_stream_resets_total", "Publisher restarts (event_id back to 0)");
  dead_letters_total = &metrics.counter("kvidx_dead_letters_total", "Messages published on the dead-letter subject");
  dead_letters_truncated = &metrics.counter("kvidx_dead_letters_truncated_total",
                                            "Dead letters published with the body cut to fit the server's max_payload");
  const char* failure_reasons[] = {"too_large", "publish_error"};  // DeadLetterFailure order
  for (int r = 0; r < 2; ++r) {
    dead_letter_failures[r] = &metrics.counter("kvidx_dead_letter_failures_total",
                                               "Rejected messages whose dead letter could not be published",
                                               {{"reason", failure_reasons[r]}});
  }
  stream_limit_rejections = &metrics.counter("kvidx_stream_limit_rejections_total",
                                             "Event messages dead-lettered because they would exceed --max-streams");
  for (std::size_t k = 0; k < kCodecErrorKinds; ++k) {
    queries_rejected[k] = &metrics.counter("kvidx_queries_rejected_total", "Score queries answered with bad_request",
                                           {{"reason", std::string(to_string(static_cast<CodecErrorKind>(k)))}});
  }
  snapshots_total = &metrics.counter("kvidx_snapshots_total", "Snapshots written");
  consumer_resets_total = &metrics.counter(
      "kvidx_consumer_resets_total", "Events consumer re-created to re-read from the next expected stream sequence");
  fetch_errors_total = &metrics.counter("kvidx_fetch_errors_total",
                                        "Failed fetches from the events consumer (disconnected, consumer gone)");
  stream_holes_total =
      &metrics.counter("kvidx_stream_holes_total", "Events stream sequences that no longer existed when read");
  snapshot_failures_total = &metrics.counter("kvidx_snapshot_failures_total", "Snapshot writes that failed");
  reply_failures_total = &metrics.counter("kvidx_reply_failures_total", "Replies that could not be published");
  reply_too_large_total = &metrics.counter(
      "kvidx_replies_too_large_total",
      "Replies over the server's max_payload answered with a reply_too_large error (requester did not accept chunks)");
  local_batches_total =
      &metrics.counter("kvidx_local_event_batches_total", "Event batches from in-process sources (ZMQ bridges)");
  lifecycle_total = &metrics.counter("kvidx_request_lifecycle_total", "Request lifecycle messages applied");
  lifecycle_rejected =
      &metrics.counter("kvidx_request_lifecycle_rejected_total", "Request lifecycle messages rejected");
  query_latency = &metrics.histogram("kvidx_query_duration_seconds", "Query handling latency",
                                     latency_buckets_seconds(), {{"subject", "scores"}});
  admin_latency = &metrics.histogram("kvidx_query_duration_seconds", "Query handling latency",
                                     latency_buckets_seconds(), {{"subject", "admin"}});
}

void register_indexer_gauges(MetricsRegistry& metrics, const LaneIndexer& indexer) {
  const LaneIndexer* ix = &indexer;
  metrics.gauge_callback("kvidx_lanes", "Lane threads", {}, [ix] { return static_cast<double>(ix->lane_count()); });
  for (std::size_t lane = 0; lane < indexer.lane_count(); ++lane) {
    metrics.gauge_callback("kvidx_lane_queue_depth", "Tasks waiting in a lane's queue",
                           {{"lane", std::to_string(lane)}}, [ix, lane] {
                             const auto depths = ix->metrics().lane_queue_depths;
                             return lane < depths.size() ? static_cast<double>(depths[lane]) : 0.0;
                           });
  }
  metrics.gauge_callback("kvidx_tree_blocks", "Blocks held in the device tier, summed over streams", {},
                         [ix] { return static_cast<double>(ix->shard_sizes_now().block_count); });
  metrics.gauge_callback("kvidx_tree_nodes", "Attached radix tree nodes", {},
                         [ix] { return static_cast<double>(ix->tree().node_count()); });
  metrics.gauge_callback("kvidx_tree_blocks_pending_cleanup",
                         "Blocks no stream holds, attached until the next cleanup (upper bound)", {},
                         [ix] { return static_cast<double>(ix->tree().dead_block_estimate()); });
  metrics.gauge_callback("kvidx_tree_workers", "Streams (worker, rank) holding blocks", {},
                         [ix] { return static_cast<double>(ix->shard_sizes_now().worker_count); });
  // Every storage tier's tree (the kvidx_tree_* gauges above are the device tree's).
  for (const StorageTier tier : kStorageTiers) {
    const std::size_t t = tier_index(tier);
    const std::string name(to_string(tier));
    metrics.gauge_callback("kvidx_tier_blocks", "Blocks held in a storage tier, summed over streams", {{"tier", name}},
                           [ix, t] { return static_cast<double>(ix->shard_sizes_now().blocks_by_tier[t]); });
    metrics.gauge_callback("kvidx_tier_streams", "Streams (worker, rank) holding blocks in a storage tier",
                           {{"tier", name}},
                           [ix, t] { return static_cast<double>(ix->shard_sizes_now().streams_by_tier[t]); });
    metrics.gauge_callback("kvidx_tier_events_total", "Events applied, by the storage tier they carry",
                           {{"tier", name}}, [ix, t] { return static_cast<double>(ix->metrics().applied_by_tier[t]); });
    metrics.gauge_callback("kvidx_tree_cleanup_nodes_removed_total",
                           "Nodes no stream held, cut off by cleanup passes, by storage tier", {{"tier", name}},
                           [ix, t] { return static_cast<double>(ix->metrics().cleanup_nodes_removed[t]); });
    metrics.gauge_callback("kvidx_tree_cleanup_nodes_merged_total",
                           "Only children folded into their parent by cleanup passes (same holders), by storage tier",
                           {{"tier", name}},
                           [ix, t] { return static_cast<double>(ix->metrics().cleanup_nodes_merged[t]); });
  }
  // What the tree did with the events the lanes applied (unknown parents, removals of unknown
  // blocks and malformed events are counted here, not dead-lettered: they are valid JSON).
  const char* statuses[] = {"ok", "parent_not_found", "block_not_found", "invalid"};
  for (std::size_t k = 0; k < LaneIndexerMetrics::kKinds; ++k) {
    for (std::size_t st = 0; st < LaneIndexerMetrics::kStatuses; ++st) {
      metrics.gauge_callback("kvidx_tree_apply_total", "Events applied by the tree, by type and outcome",
                             {{"type", kKinds[k]}, {"status", statuses[st]}},
                             [ix, k, st] { return static_cast<double>(ix->metrics().applied[k][st]); });
    }
  }
}

}  // namespace kvidx::bus
