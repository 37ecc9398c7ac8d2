// RouterEventSink: where the bridge delivers converted RouterEvents, one engine batch per call, in
// engine order. Two implementations: NatsEventSink (nats_event_sink.h: kv.events.<worker_id> over
// JetStream or core NATS, for a separate `kvidx serve`) and LaneIndexerSink (below: applied
// in-process, for a bridge embedded next to the index).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>

#include "libindexer/protocol.h"
#include "libindexer/result.h"

namespace kvidx {
class LaneIndexer;
}

namespace kvidx::bridge {

// Outcome of a delivery: ok, or why it failed (the bridge counts and logs it, and goes on).
using SinkStatus = Status<std::string>;

class RouterEventSink {
 public:
  virtual ~RouterEventSink() = default;
  // Called from the bridge thread only; `events` may be empty (nothing to deliver).
  virtual SinkStatus deliver(std::span<const RouterEvent> events) = 0;
};

// Enqueues onto a LaneIndexer's lanes. NOTE: this bypasses KvidxService's StreamSequencer, which
// is fine: the bridge already orders batches by engine sequence and emits explicit `cleared`
// events for restarts and (with clear_on_gap) for unrecoverable gaps.
class LaneIndexerSink final : public RouterEventSink {
 public:
  explicit LaneIndexerSink(LaneIndexer& indexer) : indexer_(indexer) {}
  SinkStatus deliver(std::span<const RouterEvent> events) override;

 private:
  LaneIndexer& indexer_;
};

}  // namespace kvidx::bridge
