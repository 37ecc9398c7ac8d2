#include "bridge/router_event_sink.h"

namespace kvidx::bridge {

SinkStatus LaneIndexerSink::deliver(std::span<const RouterEvent> events) {
  if (feed_.deliver_copy(events) != IndexerStatus::ok) return SinkStatus("indexer is offline");
  return {};
}

}  // namespace kvidx::bridge
