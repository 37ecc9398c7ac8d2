// InProcessBridges: the ZMQ sources embedded in one `kvidx serve` (--zmq, repeatable). One
// ZmqEventBridge per engine socket, all delivering through one ServiceEventSink into the same
// KvidxService, so bridged events take the service's own ingestion path.
//
// Lifecycle (NOTE: the order matters): start() after the service's start(), since the service
// refuses local events before it runs (a refused batch is counted as a sink failure and lost);
// stop() before the service's stop(), so every batch a bridge has converted is dispatched before
// the lanes drain and the final snapshot is cut. The service refuses anything that arrives after
// its stop() began, so a late batch can never slip in behind the snapshot.
#pragma once

#include <memory>
#include <vector>

#include "bridge/service_event_sink.h"
#include "bridge/zmq_event_bridge.h"

namespace kvidx::bridge {

class InProcessBridges {
 public:
  InProcessBridges(bus::KvidxService& service, std::vector<ZmqBridgeConfig> sources);
  ~InProcessBridges();  // stop()
  InProcessBridges(const InProcessBridges&) = delete;
  InProcessBridges& operator=(const InProcessBridges&) = delete;

  // Connects and starts every bridge; on the first failure stops those already started and
  // returns the error, naming the source's endpoint.
  SinkStatus start();
  // Stops and joins every bridge (idempotent).
  void stop();

  const std::vector<ZmqBridgeConfig>& sources() const { return sources_; }
  // Per source, in the order given.
  std::vector<ZmqBridgeStats> stats() const;

 private:
  std::vector<ZmqBridgeConfig> sources_;
  ServiceEventSink sink_;
  std::vector<std::unique_ptr<ZmqEventBridge>> bridges_;
};

}  // namespace kvidx::bridge
