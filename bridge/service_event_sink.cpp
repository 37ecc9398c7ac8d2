#include "bridge/service_event_sink.h"

#include "libbus/service.h"

namespace kvidx::bridge {

SinkStatus ServiceEventSink::deliver(std::span<const RouterEvent> events) {
  if (events.empty()) return {};
  if (auto status = service_.ingest_local_events(events); !status.ok()) {
    return SinkStatus(status.error().message);
  }
  return {};
}

}  // namespace kvidx::bridge
