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

namespace kvidx::bridge {

// Outcome of a delivery: ok, or why it failed (the bridge counts and logs it, and goes on).
class SinkStatus {
 public:
  SinkStatus() = default;
  static SinkStatus failure(std::string message) {
    SinkStatus s;
    s.error_ = std::move(message);
    return s;
  }
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return *error_; }

 private:
  std::optional<std::string> error_;
};

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
