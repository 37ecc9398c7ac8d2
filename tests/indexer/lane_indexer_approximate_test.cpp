// LaneIndexer in approximate mode: routing decisions stored through the lanes, expired and
// size-capped through the same lanes, removals keeping the pruner consistent. Time is a manual
// clock, so every expiry in these tests happens exactly when the test advances it.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;
using namespace kvidx::testing;
using namespace std::chrono_literals;

namespace {

// Readable from any thread; moves only when the test says so.
class ManualClock {
 public:
  RoutingDecisionPruner::TimePoint now() const {
    return RoutingDecisionPruner::TimePoint{std::chrono::nanoseconds{nanos_.load(std::memory_order_acquire)}};
  }
  void advance(std::chrono::nanoseconds step) { nanos_.fetch_add(step.count(), std::memory_order_acq_rel); }
  RoutingDecisionPruner::Clock as_clock() {
    return [this] { return now(); };
  }

 private:
  std::atomic<std::int64_t> nanos_{5'000'000'000};
};

LaneIndexerOptions approximate_options(ManualClock& clock, std::chrono::seconds ttl, std::size_t lanes = 2,
                                       std::size_t max_tree_size = std::size_t{1} << 20, double ratio = 0.8) {
  LaneIndexerOptions options;
  options.num_lanes = lanes;
  options.prune = PruneConfig{ttl, max_tree_size, ratio};
  options.clock = clock.as_clock();
  return options;
}

RoutingDecisionStatus decide(LaneIndexer& index, WorkerWithDpRank stream, const Hashes& locals) {
  const auto local = local_hashes(locals);
  const auto sequence = external_hashes({}, locals);
  return index.process_routing_decision(stream, local, sequence);
}

void require_decision(LaneIndexer& index, WorkerWithDpRank stream, const Hashes& locals) {
  REQUIRE(decide(index, stream, locals) == RoutingDecisionStatus::recorded);
}

std::optional<std::uint32_t> score(const LaneIndexer& index, const Hashes& query, WorkerWithDpRank stream) {
  return score_of(index.find_matches(local_hashes(query)), stream);
}

ApproximateModeMetrics approx_metrics(const LaneIndexer& index) { return index.metrics().approximate; }

template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return done();
}

}  // namespace

TEST_CASE("routing decisions become scores through the stream's lane") {
  ManualClock clock;
  LaneIndexer index(approximate_options(clock, 10s));
  CHECK(index.approximate());

  require_decision(index, worker(1), {1, 2, 3});
  require_decision(index, worker(2), {1, 2});
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {1, 2, 3}, worker(1)) == std::optional<std::uint32_t>{3});
  CHECK(score(index, {1, 2, 3}, worker(2)) == std::optional<std::uint32_t>{2});

  // A longer decision on the same chain only stores the new tail; the known prefix is renewed.
  require_decision(index, worker(1), {1, 2, 3, 4});
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {1, 2, 3, 4}, worker(1)) == std::optional<std::uint32_t>{4});
  CHECK(index.tracked_blocks(worker(1)) == 4);
  CHECK(index.tree().block_count(worker(1)) == 4);

  const std::vector<LocalBlockHash> two = local_hashes({1, 2});
  const std::vector<ExternalSequenceBlockHash> one = external_hashes({}, {1});
  CHECK(index.process_routing_decision(worker(3), two, one) == RoutingDecisionStatus::length_mismatch);

  const auto metrics = approx_metrics(index);
  CHECK(metrics.enabled);
  CHECK(metrics.decisions_recorded == 3);
  CHECK(metrics.decisions_rejected == 1);
  CHECK(metrics.synthetic_stored == 3);
  CHECK(metrics.synthetic_removed == 0);
  CHECK(metrics.synthetic_not_applied == 0);
  CHECK(metrics.tracked_blocks == 6);
  CHECK(index.metrics().applied_with(ApplyStatus::ok) == 3);
}

TEST_CASE("an indexer without a PruneConfig ignores routing decisions") {
  LaneIndexer index(2);
  CHECK_FALSE(index.approximate());
  CHECK(decide(index, worker(1), {1, 2}) == RoutingDecisionStatus::not_approximate);
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(index.find_matches(local_hashes({1, 2})).scores.empty());
  CHECK_FALSE(index.metrics().approximate.enabled);
}

TEST_CASE("an invalid PruneConfig is refused at construction") {
  LaneIndexerOptions options;
  options.prune = PruneConfig{0s, 10, 0.5};
  CHECK_THROWS_AS(LaneIndexer{options}, std::invalid_argument);
}

TEST_CASE("expired decisions are removed through the lane after flush") {
  ManualClock clock;
  LaneIndexer index(approximate_options(clock, 10s));

  require_decision(index, worker(1), {1, 2, 3});
  clock.advance(5s);
  require_decision(index, worker(2), {7, 8});
  clock.advance(4s);
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {1, 2, 3}, worker(1)) == std::optional<std::uint32_t>{3});

  clock.advance(1s);  // exactly worker 1's TTL
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {1, 2, 3}, worker(1)) == std::nullopt);
  CHECK(score(index, {7, 8}, worker(2)) == std::optional<std::uint32_t>{2});
  CHECK(index.shard_sizes().block_count == 2);

  // A renewal moves the expiry: worker 2's blocks now live until 10 s after this decision.
  require_decision(index, worker(2), {7, 8});
  clock.advance(9s);
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {7, 8}, worker(2)) == std::optional<std::uint32_t>{2});
  clock.advance(1s);
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(index.find_matches(local_hashes({7, 8})).scores.empty());
  CHECK(index.shard_sizes().block_count == 0);

  const auto metrics = approx_metrics(index);
  CHECK(metrics.synthetic_stored == 2);  // the renewal stored nothing new
  CHECK(metrics.synthetic_removed == 2);
  CHECK(metrics.blocks_pruned == 5);
  CHECK(metrics.synthetic_not_applied == 0);
  CHECK(metrics.tracked_blocks == 0);
}

TEST_CASE("the prune pump expires decisions without a flush") {
  ManualClock clock;
  auto options = approximate_options(clock, 10s);
  options.prune_pump_max_sleep = 2ms;
  LaneIndexer index(options);

  require_decision(index, worker(4), {1, 2});
  REQUIRE(index.flush_stream(worker(4)) == IndexerStatus::ok);
  CHECK(score(index, {1, 2}, worker(4)) == std::optional<std::uint32_t>{2});

  clock.advance(10s);
  // NOTE: no flush: only the pump can queue the Removed event, and its lane then applies it.
  CHECK(eventually([&] { return index.tree().block_count(worker(4)) == 0; }));
  CHECK(approx_metrics(index).synthetic_removed == 1);
}

TEST_CASE("size cap prunes the oldest-expiring decisions down to the target ratio") {
  ManualClock clock;
  // At most 10 blocks; a prune keeps floor(10 * 0.5) = 5.
  LaneIndexer index(approximate_options(clock, 100s, 3, 10, 0.5));

  require_decision(index, worker(1), {1, 2, 3});
  clock.advance(1s);
  require_decision(index, worker(2), {4, 5, 6});
  clock.advance(1s);
  require_decision(index, worker(3), {7, 8, 9});
  clock.advance(1s);
  CHECK(approx_metrics(index).tracked_blocks == 9);
  require_decision(index, worker(4), {10, 11});  // 11 > 10: kicks the pump

  // NOTE: the kicked pump prunes on its own; no flush is involved in reaching 5 blocks.
  CHECK(eventually([&] { return index.shard_sizes().block_count == 5; }));
  CHECK(approx_metrics(index).tracked_blocks == 5);
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(index.find_matches(local_hashes({1, 2, 3})).scores.empty());
  CHECK(index.find_matches(local_hashes({4, 5, 6})).scores.empty());
  CHECK(score(index, {7, 8, 9}, worker(3)) == std::optional<std::uint32_t>{3});
  CHECK(score(index, {10, 11}, worker(4)) == std::optional<std::uint32_t>{2});

  const auto metrics = approx_metrics(index);
  CHECK(metrics.blocks_pruned == 6);
  CHECK(metrics.synthetic_removed == 2);
  CHECK(metrics.synthetic_not_applied == 0);
}

TEST_CASE("removing a worker forgets its pruner state") {
  ManualClock clock;
  LaneIndexer index(approximate_options(clock, 10s, 4));

  const auto w7r0 = worker(7, 0);
  const auto w7r1 = worker(7, 1);
  const auto w8 = worker(8, 0);
  require_decision(index, w7r0, {1, 2, 3});
  require_decision(index, w7r1, {1, 2});
  require_decision(index, w8, {1, 5});
  REQUIRE(index.remove_worker(7) == IndexerStatus::ok);
  CHECK(index.tracked_blocks(w7r0) == 0);
  CHECK(index.tracked_blocks(w7r1) == 0);
  CHECK(index.tracked_blocks(w8) == 2);
  CHECK(index.tree().block_count(w7r0) == 0);
  CHECK(index.tree().block_count(w7r1) == 0);

  // The same decision again must store the blocks anew (a pruner that remembered them would only
  // renew, and the tree would stay empty for the worker).
  require_decision(index, w7r0, {1, 2, 3});
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {1, 2, 3}, w7r0) == std::optional<std::uint32_t>{3});

  REQUIRE(index.remove_worker_dp_rank(8, 0) == IndexerStatus::ok);
  CHECK(index.tracked_blocks(w8) == 0);
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {1, 5}, w8) == std::nullopt);
  require_decision(index, w8, {1, 5});
  REQUIRE(index.flush() == IndexerStatus::ok);
  CHECK(score(index, {1, 5}, w8) == std::optional<std::uint32_t>{2});

  REQUIRE(index.reset_worker_dp_rank_and_wait(7, 0) == IndexerStatus::ok);
  CHECK(index.tracked_blocks(w7r0) == 0);
  CHECK(score(index, {1, 2, 3}, w7r0) == std::nullopt);

  // An engine Cleared on an approximate stream also drops what the pruner tracked for it.
  REQUIRE(index.enqueue_event(make_clear_event_with_dp_rank(8, 0)) == IndexerStatus::ok);
  CHECK(index.tracked_blocks(w8) == 0);

  // Nothing left to expire: no synthetic Removed names a block the tree no longer holds.
  clock.advance(10s);
  REQUIRE(index.flush() == IndexerStatus::ok);
  const auto metrics = approx_metrics(index);
  CHECK(metrics.synthetic_removed == 0);
  CHECK(metrics.synthetic_not_applied == 0);
  CHECK(metrics.tracked_blocks == 0);
  CHECK(index.shard_sizes().block_count == 0);
}

TEST_CASE("shutdown joins the prune pump and later decisions report offline") {
  ManualClock clock;
  auto options = approximate_options(clock, 10s);
  options.prune_pump_max_sleep = 1ms;
  LaneIndexer index(options);
  require_decision(index, worker(1), {1});
  index.shutdown();
  CHECK(decide(index, worker(1), {2}) == RoutingDecisionStatus::offline);
  index.shutdown();  // idempotent
}

TEST_CASE("concurrent decisions, expiry and queries keep the pruner and the tree in step") {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kDecisionsPerThread = 1'500;
#else
  constexpr int kDecisionsPerThread = 10'000;
#endif
  constexpr int kDeciders = 3;
  constexpr std::uint64_t kStreamsPerDecider = 8;
  ManualClock clock;
  auto options = approximate_options(clock, 1s, 4, 400, 0.75);
  options.prune_pump_max_sleep = 1ms;
  LaneIndexer index(options);

  std::atomic<bool> deciding{true};
  std::atomic<std::size_t> queries{0};
  std::atomic<std::size_t> impossible_scores{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kDeciders; ++t) {
    threads.emplace_back([&, t] {
      std::uint64_t state = 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(t + 1);
      for (int i = 0; i < kDecisionsPerThread; ++i) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        const auto stream = worker(static_cast<WorkerId>(t) * kStreamsPerDecider + (state >> 60) % kStreamsPerDecider);
        Hashes chain;
        const std::size_t length = 1 + (state >> 40) % 6;
        for (std::size_t d = 0; d < length; ++d) chain.push_back(1 + ((state >> (4 * d)) & 3));
        CHECK(decide(index, stream, chain) == RoutingDecisionStatus::recorded);
        if (i % 64 == 0) clock.advance(100ms);
        if (t == 0 && i % 500 == 0)
          REQUIRE(index.remove_worker(static_cast<WorkerId>((state >> 20) % 24)) == IndexerStatus::ok);
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      while (deciding.load(std::memory_order_acquire)) {
        const auto scores = index.find_matches(local_hashes({1, 2, 3, 4}));
        for (const auto& [stream, value] : scores.scores) {
          if (value > 4 || stream.worker_id >= kDeciders * kStreamsPerDecider) impossible_scores.fetch_add(1);
        }
        queries.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (int t = 0; t < kDeciders; ++t) threads[static_cast<std::size_t>(t)].join();
  deciding.store(false, std::memory_order_release);
  for (std::size_t t = kDeciders; t < threads.size(); ++t) threads[t].join();

  CHECK(impossible_scores.load() == 0);
  CHECK(queries.load() > 0);
  REQUIRE(index.flush() == IndexerStatus::ok);
  // NOTE: after the flush nothing moves any more: the clock is still, and flush's own prune left
  // the pruner at or below its cap, so the pump finds nothing to do.
  for (WorkerId w = 0; w < kDeciders * kStreamsPerDecider; ++w) {
    INFO("worker " << w);
    CHECK(index.tracked_blocks(worker(w)) == index.tree().block_count(worker(w)));
  }
  const auto metrics = approx_metrics(index);
  CHECK(metrics.synthetic_not_applied == 0);
  CHECK(metrics.tracked_blocks <= 400);
  CHECK(metrics.decisions_recorded == static_cast<std::uint64_t>(kDeciders * kDecisionsPerThread));
  CHECK(metrics.synthetic_removed > 0);
}
