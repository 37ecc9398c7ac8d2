#include "libindexer/intake/intake_feed.h"

namespace kvidx {

IndexerStatus IntakeFeed::deliver(std::span<RouterEvent> events) {
  to_lanes_.clear();
  intake_.admit(events, to_lanes_);
  if (to_lanes_.empty()) return IndexerStatus::ok;
  const IndexerStatus status = indexer_.enqueue_events(to_lanes_);
  to_lanes_.clear();
  return status;
}

IndexerStatus IntakeFeed::deliver_copy(std::span<const RouterEvent> events) {
  copied_.assign(events.begin(), events.end());
  const IndexerStatus status = deliver(copied_);
  copied_.clear();
  return status;
}

}  // namespace kvidx
