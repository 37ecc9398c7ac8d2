// RouterEventSink: where the bridge delivers converted RouterEvents, one engine batch per call, in
// engine order. Two implementations: NatsEventSink (nats_event_sink.h: kv.events.<worker_id> over
// JetStream or core NATS, for a separate `kvidx serve`) and LaneIndexerSink (below: applied
// in-process, for a bridge embedded next to the index).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>

#include "libindexer/intake/intake_feed.h"
#include "libindexer/protocol.h"
#include "libindexer/result.h"

namespace kvidx::bridge {

// Outcome of a delivery: ok, or why it failed (the bridge counts and logs it, and goes on).
using SinkStatus = Status<std::string>;

class RouterEventSink {
 public:
  virtual ~RouterEventSink() = default;
  // Called from the bridge thread only; `events` may be empty (nothing to deliver).
  virtual SinkStatus deliver(std::span<const RouterEvent> events) = 0;
};

// Enqueues onto a LaneIndexer's lanes through the service's intake (libindexer/intake/: duplicate
// event_ids skipped, gaps counted, restarts cleared, optionally clear on gap), so a bridge
// embedded next to a bare LaneIndexer builds the index a `kvidx serve` would from its events.
class LaneIndexerSink final : public RouterEventSink {
 public:
  explicit LaneIndexerSink(LaneIndexer& indexer, IntakeOptions options = {}) : feed_(indexer, options) {}
  SinkStatus deliver(std::span<const RouterEvent> events) override;
  // Duplicates skipped, gaps, restarts so far.
  const IntakeTally& intake_totals() const { return feed_.totals(); }

 private:
  IntakeFeed feed_;
};

}  // namespace kvidx::bridge
