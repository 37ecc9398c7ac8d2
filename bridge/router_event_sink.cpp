#include "bridge/router_event_sink.h"

#include "libindexer/lanes/lane_indexer.h"

namespace kvidx::bridge {

SinkStatus LaneIndexerSink::deliver(std::span<const RouterEvent> events) {
  for (const RouterEvent& event : events) {
    if (indexer_.enqueue_event(event) != IndexerStatus::ok) return SinkStatus("indexer is offline");
  }
  return {};
}

}  // namespace kvidx::bridge
