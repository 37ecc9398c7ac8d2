#include "bench/common/engines.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bench/baselines/flat_hash_index.h"
#include "bench/baselines/mutex_radix_tree.h"
#include "bench/baselines/positional_index.h"
#include "libindexer/lanes/lane_indexer.h"

namespace kvidx::bench {

std::string engine_name(EngineKind kind) {
  switch (kind) {
    case EngineKind::kvidx: return "kvidx";
    case EngineKind::mutex_radix: return "mutex-radix";
    case EngineKind::flat_hash: return "flat-hash";
    case EngineKind::positional: return "positional";
  }
  return "?";
}

namespace {

class KvidxEngine final : public Engine {
 public:
  explicit KvidxEngine(std::size_t lanes) : indexer_(lanes) {}
  void enqueue(RouterEvent event) override { indexer_.enqueue_event(std::move(event)); }
  void flush() override { indexer_.flush(); }
  std::size_t find(std::span<const LocalBlockHash> query) const override {
    // The service's query path: device scores plus every lower tier's (none in these workloads).
    return indexer_.find_tiered_matches(query).device.scores.size();
  }
  std::vector<RouterEvent> dump() override { return indexer_.dump_events().value_or(std::vector<RouterEvent>{}); }
  std::vector<std::pair<std::string, std::size_t>> memory_parts() override {
    const IndexMemory m = indexer_.memory();
    return {{"lookups", m.lookup_bytes},          {"edges", m.trees.edge_bytes}, {"coverage", m.trees.coverage_bytes},
            {"holder names", m.trees.name_bytes}, {"nodes", m.trees.node_bytes}, {"child tables", m.trees.child_bytes}};
  }
  std::size_t rejected() const override {
    const auto m = indexer_.metrics();
    return m.applied_total() - m.applied_with(ApplyStatus::ok);
  }
  std::string shape() const override {
    const auto& tree = indexer_.tree();
    return "nodes " + std::to_string(tree.node_count()) + ", attached blocks " +
           std::to_string(tree.attached_block_count()) +
           ", dead blocks <= " + std::to_string(tree.dead_block_estimate());
  }

 private:
  LaneIndexer indexer_;
};

template <typename Index>
class BaselineEngine final : public Engine {
 public:
  explicit BaselineEngine(std::size_t lanes) {
    lanes_.reserve(std::max<std::size_t>(1, lanes));
    for (std::size_t i = 0; i < std::max<std::size_t>(1, lanes); ++i) lanes_.push_back(std::make_unique<Lane>());
    for (auto& lane : lanes_) lane->thread = std::thread([this, raw = lane.get()] { run(*raw); });
  }
  ~BaselineEngine() override {
    for (auto& lane : lanes_) {
      {
        std::lock_guard lock(lane->mutex);
        lane->stop = true;
      }
      lane->wake.notify_one();
    }
    for (auto& lane : lanes_) lane->thread.join();
  }

  void enqueue(RouterEvent event) override {
    auto [it, inserted] = assignment_.try_emplace(event.stream(), next_lane_);
    if (inserted) next_lane_ = (next_lane_ + 1) % lanes_.size();
    Lane& lane = *lanes_[it->second];
    {
      std::lock_guard lock(lane.mutex);
      lane.queue.push_back(std::move(event));
      ++lane.pending;
    }
    lane.wake.notify_one();
  }
  void flush() override {
    for (auto& lane : lanes_) {
      std::unique_lock lock(lane->mutex);
      lane->drained.wait(lock, [&] { return lane->pending == 0; });
    }
  }
  std::size_t find(std::span<const LocalBlockHash> query) const override {
    return index_.find_matches(query).scores.size();
  }
  std::vector<RouterEvent> dump() override {
    flush();
    return index_.dump_events();
  }
  std::size_t rejected() const override { return rejected_.load(); }

 private:
  struct Lane {
    std::mutex mutex;
    std::condition_variable wake;
    std::condition_variable drained;
    std::vector<RouterEvent> queue;  // guarded by mutex
    std::size_t pending = 0;         // guarded: queued or being applied
    bool stop = false;               // guarded
    std::thread thread;
  };

  void run(Lane& lane) {
    std::vector<RouterEvent> batch;
    for (;;) {
      {
        std::unique_lock lock(lane.mutex);
        lane.wake.wait(lock, [&] { return lane.stop || !lane.queue.empty(); });
        if (lane.queue.empty()) return;
        batch.swap(lane.queue);
      }
      for (const auto& event : batch) {
        if (!index_.apply_event(event)) rejected_.fetch_add(1, std::memory_order_relaxed);
      }
      const std::size_t done = batch.size();
      batch.clear();
      {
        std::lock_guard lock(lane.mutex);
        lane.pending -= done;
        if (lane.pending == 0) lane.drained.notify_all();
      }
    }
  }

  Index index_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // NOTE: the producer contract (one thread) makes the assignment map producer-private.
  std::unordered_map<WorkerWithDpRank, std::size_t, WorkerWithDpRankHasher> assignment_;
  std::size_t next_lane_ = 0;
  std::atomic<std::size_t> rejected_{0};
};

}  // namespace

std::unique_ptr<Engine> make_engine(EngineKind kind, std::size_t lanes) {
  switch (kind) {
    case EngineKind::kvidx: return std::make_unique<KvidxEngine>(lanes);
    case EngineKind::mutex_radix: return std::make_unique<BaselineEngine<MutexRadixTree>>(lanes);
    case EngineKind::flat_hash: return std::make_unique<BaselineEngine<FlatHashIndex>>(lanes);
    case EngineKind::positional: return std::make_unique<BaselineEngine<PositionalIndex>>(lanes);
  }
  return nullptr;
}

}  // namespace kvidx::bench
