// LaneIndexerTestPeer: test-only entry points into LaneIndexer, reached as its friend so the
// production header carries none of them. Header-only; include from *_test.cpp files only.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

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
  // Queues `events` on `lane` followed by a barrier in one push, so the lane takes them as one
  // batch, and waits for the barrier. `marker` watches an extra no-op barrier of that batch: only
  // the batch (and the lane, until that barrier has arrived) holds it, so it expires once the lane
  // has let go of the batch.
  static IndexerStatus push_batch_and_flush(LaneIndexer& indexer, LaneId lane, std::vector<RouterEvent> events,
                                            std::weak_ptr<void>& marker) {
    std::vector<LaneIndexer::LaneTask> tasks;
    for (auto& event : events) {
      tasks.push_back(LaneIndexer::LaneTask{LaneIndexer::TaskKind::event, std::move(event), {}, nullptr});
    }
    auto watched = std::make_shared<LaneIndexer::Completion>(1);
    marker = watched;
    tasks.push_back(LaneIndexer::LaneTask{LaneIndexer::TaskKind::barrier, {}, {}, std::move(watched)});
    auto completion = std::make_shared<LaneIndexer::Completion>(1);
    tasks.push_back(LaneIndexer::LaneTask{LaneIndexer::TaskKind::barrier, {}, {}, completion});
    if (!indexer.push_all(*indexer.lanes_.at(lane), tasks)) return IndexerStatus::offline;
    return indexer.finish_barrier(*completion);
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
