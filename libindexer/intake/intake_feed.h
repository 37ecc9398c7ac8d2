// IntakeFeed: an EventIntake in front of a LaneIndexer, for the places that feed lanes without a
// KvidxService: offline replay and the bridge's in-process LaneIndexerSink. Events go through the
// same ordering rules as the service's (event_intake.h), then to the lanes in one enqueue per call.
#pragma once

#include <span>
#include <vector>

#include "libindexer/intake/event_intake.h"
#include "libindexer/lanes/lane_indexer.h"

namespace kvidx {

class IntakeFeed {
 public:
  explicit IntakeFeed(LaneIndexer& indexer, IntakeOptions options = {}) : indexer_(indexer), intake_(options) {}

  // Sequences `events` (moved from) and enqueues what is to be applied. offline: the indexer is
  // offline (the events were sequenced, so their watermarks moved; nothing more can be applied).
  IndexerStatus deliver(std::span<RouterEvent> events);
  // As above, from events the caller keeps (copied).
  IndexerStatus deliver_copy(std::span<const RouterEvent> events);

  const EventIntake& intake() const { return intake_; }
  const IntakeTally& totals() const { return intake_.totals(); }

 private:
  LaneIndexer& indexer_;
  EventIntake intake_;
  std::vector<RouterEvent> copied_;    // scratch of deliver_copy
  std::vector<RouterEvent> to_lanes_;  // scratch: sequenced, not yet enqueued
};

}  // namespace kvidx
