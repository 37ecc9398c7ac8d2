// LaneIndexerTestPeer: test-only entry points into LaneIndexer, reached as its friend so the
// production header carries none of them. Header-only; include from *_test.cpp files only.
#pragma once

#include <cstddef>
#include <mutex>
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
  static constexpr std::size_t kSpentHandBackTasks = LaneIndexer::kSpentHandBackTasks;
  // Applied tasks `lane` has handed back for the next push to destroy (LaneIndexer::run_lane).
  static std::size_t spent_tasks_waiting(LaneIndexer& indexer, LaneId lane) {
    auto& l = *indexer.lanes_.at(lane);
    std::lock_guard lock(l.mutex);
    return l.spent.size();
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
