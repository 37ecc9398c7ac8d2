// ServiceEventSink: delivers a bridge's RouterEvents into a running KvidxService in the same
// process, through KvidxService::ingest_local_events: the service's own ingestion path (event_id
// sequencing, lanes, counters, stats, snapshots), not a side door into the tree. One engine batch
// per call, in engine order; nothing to acknowledge. For a separate `kvidx serve` use
// NatsEventSink; for a bare LaneIndexer, LaneIndexerSink.
#pragma once

#include "bridge/router_event_sink.h"

namespace kvidx::bus {
class KvidxService;
}

namespace kvidx::bridge {

class ServiceEventSink final : public RouterEventSink {
 public:
  explicit ServiceEventSink(bus::KvidxService& service) : service_(service) {}
  // Fails (the bridge counts it) when the service is not running.
  SinkStatus deliver(std::span<const RouterEvent> events) override;

 private:
  bus::KvidxService& service_;
};

}  // namespace kvidx::bridge
