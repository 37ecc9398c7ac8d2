// The counters and histograms of `kvidx serve` (Prometheus names in README.md, *Metrics*), created
// once in one registry. Gauges read live state through callbacks and are registered by the part
// that owns the state (ingest, snapshots, lifecycle), or here for the indexer's.
#pragma once

#include <cstddef>

#include "libbus/metrics.h"
#include "libcodec/codec_result.h"

namespace kvidx {
class LaneIndexer;
}  // namespace kvidx

namespace kvidx::bus {

enum class EventResult : std::size_t { applied, duplicate, rejected };
enum DeadLetterFailure : std::size_t { too_large, publish_error };

struct ServiceCounters {
  explicit ServiceCounters(MetricsRegistry& metrics);

  Counter& events(std::size_t kind, EventResult result) { return *events_by[kind][static_cast<std::size_t>(result)]; }

  Counter* messages_total = nullptr;
  Counter* events_by[3][3] = {};  // [kind][EventResult]
  Counter* gaps_total = nullptr;
  Counter* missing_total = nullptr;
  Counter* resets_total = nullptr;
  Counter* dead_letters_total = nullptr;             // published
  Counter* dead_letters_truncated = nullptr;         // of those, body cut to fit max_payload
  Counter* dead_letter_failures[2] = {};             // by DeadLetterFailure: not published
  Counter* stream_limit_rejections = nullptr;        // event messages refused by max_streams
  Counter* queries_rejected[kCodecErrorKinds] = {};  // by CodecErrorKind
  Counter* snapshots_total = nullptr;
  Counter* consumer_resets_total = nullptr;
  Counter* fetch_errors_total = nullptr;
  Counter* stream_holes_total = nullptr;
  Counter* snapshot_failures_total = nullptr;
  Counter* reply_too_large_total = nullptr;
  Counter* reply_failures_total = nullptr;
  Counter* lifecycle_total = nullptr;
  Counter* lifecycle_rejected = nullptr;
  Counter* local_batches_total = nullptr;
  Histogram* query_latency = nullptr;
  Histogram* admin_latency = nullptr;
};

// Lane, tree and apply-outcome gauges of the indexer.
void register_indexer_gauges(MetricsRegistry& metrics, const LaneIndexer& indexer);

}  // namespace kvidx::bus
