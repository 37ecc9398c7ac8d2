// LaneIndexerTestPeer: test-only entry points into LaneIndexer, reached as its friend so the
// production header carries none of them. Header-only; include from *_test.cpp files only.
#pragma once

#include <utility>

#include "libindexer/lanes/lane_indexer.h"

namespace kvidx {

class LaneIndexerTestPeer {
 public:
  // Makes `lane` throw while running its next task (the lane failure path).
  static IndexerStatus inject_lane_failure_for_test(LaneIndexer& indexer, LaneId lane) {
    LaneIndexer::LaneTask task{LaneIndexer::TaskKind::fail_for_test, {}, {}, nullptr};
    return indexer.push(*indexer.lanes_.at(lane), std::move(task)) ? IndexerStatus::ok : IndexerStatus::offline;
  }
  // Runs a cleanup pass of `tier`'s tree on lane 0 now (as when enough dead blocks scheduled one).
  static IndexerStatus run_cleanup_for_test(LaneIndexer& indexer, StorageTier tier) {
    LaneIndexer::LaneTask task{LaneIndexer::TaskKind::cleanup, {}, {}, nullptr};
    task.tier = tier;
    if (!indexer.push(*indexer.lanes_.at(0), std::move(task))) return IndexerStatus::offline;
    return indexer.flush();
  }
};

}  // namespace kvidx
