#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "libindexer/hashing.h"
#include "libindexer/lanes/routing_decision_pruner.h"
#include "tests/support/event_builders.h"
#include "tests/support/reference_index.h"

namespace {

using kvidx::DecisionStatus;
using kvidx::ExternalSequenceBlockHash;
using kvidx::KvCacheRemoveData;
using kvidx::KvCacheStoreData;
using kvidx::LocalBlockHash;
using kvidx::PruneConfig;
using kvidx::RouterEvent;
using kvidx::RoutingDecisionPruner;
using kvidx::WorkerWithDpRank;
using kvidx::testing::external_hashes;
using kvidx::testing::Hashes;
using kvidx::testing::local_hashes;
using kvidx::testing::ReferenceIndex;
using namespace std::chrono_literals;

// Time only moves when the test says so; readable from any thread.
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
  std::atomic<std::int64_t> nanos_{1'000'000'000};
};

PruneConfig config_with(std::chrono::seconds ttl, std::size_t max_tree_size = std::size_t{1} << 20,
                        double ratio = 0.8) {
  PruneConfig config;
  config.ttl = ttl;
  config.max_tree_size = max_tree_size;
  config.prune_target_ratio = ratio;
  return config;
}

// One routing decision for the chain `locals` from the root, hashed as an engine would.
struct Decision {
  std::vector<LocalBlockHash> locals;
  std::vector<ExternalSequenceBlockHash> sequence;
};
Decision decision(const Hashes& locals) { return {local_hashes(locals), external_hashes({}, locals)}; }

kvidx::RecordedDecision record(RoutingDecisionPruner& pruner, WorkerWithDpRank stream, const Hashes& locals) {
  const Decision d = decision(locals);
  return pruner.record_decision(stream, d.locals, d.sequence);
}

const KvCacheStoreData& stored(const RouterEvent& event) { return std::get<KvCacheStoreData>(event.event.data); }
const KvCacheRemoveData& removed(const RouterEvent& event) { return std::get<KvCacheRemoveData>(event.event.data); }

std::uint32_t score_of(const ReferenceIndex& index, WorkerWithDpRank stream, const Hashes& query) {
  const auto locals = local_hashes(query);
  const auto scores = index.scores(locals);
  auto it = scores.find(stream);
  return it == scores.end() ? 0 : it->second;
}

constexpr WorkerWithDpRank kStreamA{1, 0};
constexpr WorkerWithDpRank kStreamB{1, 1};
constexpr WorkerWithDpRank kStreamC{2, 0};

}  // namespace

TEST_CASE("prune_config_defaults_match_the_reference_and_bad_values_are_reported") {
  const PruneConfig defaults;
  CHECK(defaults.ttl == std::chrono::seconds{120});
  CHECK(defaults.max_tree_size == 1'048'576);
  CHECK(defaults.prune_target_ratio == doctest::Approx(0.8));
  CHECK(defaults.prune_target_size() == 838'860);
  CHECK_FALSE(defaults.validate().has_value());

  CHECK(config_with(0s).validate().has_value());
  CHECK(config_with(1s, 0).validate().has_value());
  CHECK(config_with(1s, 10, 1.5).validate().has_value());
  CHECK(config_with(1s, 10, -0.1).validate().has_value());
  CHECK_FALSE(config_with(1s, 10, 0.0).validate().has_value());
  CHECK_THROWS_AS(RoutingDecisionPruner(config_with(0s)), std::invalid_argument);
}

TEST_CASE("decision_pruner_first_decision_stores_the_whole_chain_from_the_root") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());

  const auto result = record(pruner, kStreamA, {1, 2, 3});
  CHECK(result.status == DecisionStatus::ok);
  CHECK(result.new_blocks == 3);
  CHECK(result.renewed_blocks == 0);
  REQUIRE(result.store.has_value());
  CHECK(result.store->stream() == kStreamA);
  CHECK(result.store->storage_tier == std::nullopt);
  const auto& data = stored(*result.store);
  CHECK_FALSE(data.parent_hash.has_value());
  REQUIRE(data.blocks.size() == 3);
  const auto ext = external_hashes({}, {1, 2, 3});
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(data.blocks[i].block_hash == ext[i]);
    CHECK(data.blocks[i].tokens_hash == LocalBlockHash{i + 1});
  }
  CHECK(*result.store == kvidx::testing::make_store_event(1, {1, 2, 3}));
  CHECK(pruner.tracked_blocks() == 3);
  CHECK(pruner.tracked_blocks(kStreamA) == 3);
  CHECK(pruner.tracked_blocks(kStreamB) == 0);
}

TEST_CASE("decision_pruner_extending_a_chain_stores_only_the_new_suffix_under_its_parent") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  REQUIRE(record(pruner, kStreamA, {1, 2}).store.has_value());

  const auto result = record(pruner, kStreamA, {1, 2, 3, 4});
  CHECK(result.renewed_blocks == 2);
  CHECK(result.new_blocks == 2);
  REQUIRE(result.store.has_value());
  auto expected = kvidx::testing::make_store_event_with_parent(1, {1, 2}, {3, 4});
  expected.event.event_id = 1;  // ids come from one counter: the first decision took 0
  CHECK(*result.store == expected);

  // A branch off the middle of the chain hangs under the last shared block.
  const auto branch = record(pruner, kStreamA, {1, 7});
  REQUIRE(branch.store.has_value());
  CHECK(stored(*branch.store).parent_hash == external_hashes({}, {1}).back());
  REQUIRE(stored(*branch.store).blocks.size() == 1);
  CHECK(stored(*branch.store).blocks[0].block_hash == external_hashes({1}, {7}).back());
  CHECK(branch.store->event.event_id == 2);

  // The same chain on another rank of the same worker is new there.
  const auto other = record(pruner, kStreamB, {1, 2});
  REQUIRE(other.store.has_value());
  CHECK_FALSE(stored(*other.store).parent_hash.has_value());
  CHECK(other.store->event.dp_rank == 1);
  CHECK(pruner.tracked_blocks(kStreamA) == 5);
  CHECK(pruner.tracked_blocks() == 7);

  // Everything already tracked: renewal only, no event, no id consumed.
  const auto repeat = record(pruner, kStreamA, {1, 2, 3});
  CHECK_FALSE(repeat.store.has_value());
  CHECK(repeat.renewed_blocks == 3);
  CHECK(record(pruner, kStreamA, {9}).store->event.event_id == 4);
}

TEST_CASE("decision_pruner_blocks_expire_after_the_ttl_as_one_removed_event_per_stream") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  record(pruner, kStreamA, {1, 2, 3});
  record(pruner, kStreamB, {1, 2});
  clock.advance(5s);
  record(pruner, kStreamC, {4});

  clock.advance(4s);
  CHECK(pruner.collect_expired().empty());
  CHECK(pruner.next_expiry() == clock.now() + 1s);

  clock.advance(1s);  // exactly the TTL of the first two decisions
  const auto events = pruner.collect_expired();
  REQUIRE(events.size() == 2);
  CHECK(events[0].stream() == kStreamA);
  CHECK(events[1].stream() == kStreamB);
  // Descendants are named before their ancestors, so each hash is present when applied.
  const auto ext_a = external_hashes({}, {1, 2, 3});
  CHECK(removed(events[0]).block_hashes == std::vector<ExternalSequenceBlockHash>{ext_a[2], ext_a[1], ext_a[0]});
  const auto ext_b = external_hashes({}, {1, 2});
  CHECK(removed(events[1]).block_hashes == std::vector<ExternalSequenceBlockHash>{ext_b[1], ext_b[0]});
  CHECK(events[0].event.event_id < events[1].event.event_id);
  CHECK(pruner.tracked_blocks() == 1);
  CHECK(pruner.tracked_blocks(kStreamA) == 0);

  clock.advance(5s);
  const auto later = pruner.collect_expired();
  REQUIRE(later.size() == 1);
  CHECK(later[0].stream() == kStreamC);
  CHECK(pruner.tracked_blocks() == 0);
  CHECK_FALSE(pruner.next_expiry().has_value());
  CHECK(pruner.collect_expired().empty());
}

TEST_CASE("decision_pruner_repeated_decision_renews_the_ttl_of_the_blocks_it_names") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  record(pruner, kStreamA, {1, 2, 3});
  clock.advance(8s);
  // Renews blocks 1 and 2 only; block 3 keeps its first expiry.
  CHECK(record(pruner, kStreamA, {1, 2}).renewed_blocks == 2);

  clock.advance(2s);
  const auto first = pruner.collect_expired();
  REQUIRE(first.size() == 1);
  CHECK(removed(first[0]).block_hashes == external_hashes({1, 2}, {3}));
  CHECK(pruner.tracked_blocks(kStreamA) == 2);

  clock.advance(7s);
  CHECK(pruner.collect_expired().empty());
  clock.advance(1s);
  const auto second = pruner.collect_expired();
  REQUIRE(second.size() == 1);
  CHECK(removed(second[0]).block_hashes.size() == 2);
  CHECK(pruner.tracked_blocks() == 0);
}

TEST_CASE("decision_pruner_size_cap_prunes_the_oldest_expiring_blocks_down_to_the_target_ratio") {
  ManualClock clock;
  // Cap 10, target 0.5 -> 5 blocks kept once the cap is exceeded.
  RoutingDecisionPruner pruner(config_with(100s, 10, 0.5), clock.as_clock());
  record(pruner, kStreamA, {1, 2, 3, 4});  // oldest
  clock.advance(1s);
  record(pruner, kStreamB, {5, 6, 7});
  clock.advance(1s);
  const auto third = record(pruner, kStreamC, {8, 9, 10});
  CHECK(third.over_capacity == false);  // exactly at the cap is allowed
  CHECK(pruner.collect_expired().empty());
  clock.advance(1s);
  const auto fourth = record(pruner, kStreamA, {11});
  CHECK(fourth.over_capacity);
  CHECK(pruner.over_capacity());
  CHECK(pruner.tracked_blocks() == 11);

  const auto events = pruner.collect_expired();
  CHECK(pruner.tracked_blocks() == 5);
  CHECK_FALSE(pruner.over_capacity());
  // Oldest first: all of stream A's first chain (4 blocks, deepest first), then the two deepest
  // of stream B's chain; the newest chains (C and A's {11}) survive.
  REQUIRE(events.size() == 2);
  CHECK(events[0].stream() == kStreamA);
  CHECK(removed(events[0]).block_hashes ==
        std::vector<ExternalSequenceBlockHash>{external_hashes({1, 2, 3}, {4})[0], external_hashes({1, 2}, {3})[0],
                                               external_hashes({1}, {2})[0], external_hashes({}, {1})[0]});
  CHECK(events[1].stream() == kStreamB);
  CHECK(removed(events[1]).block_hashes ==
        std::vector<ExternalSequenceBlockHash>{external_hashes({5, 6}, {7})[0], external_hashes({5}, {6})[0]});
  CHECK(pruner.tracked_blocks(kStreamA) == 1);
  CHECK(pruner.tracked_blocks(kStreamB) == 1);
  CHECK(pruner.tracked_blocks(kStreamC) == 3);
}

TEST_CASE("decision_pruner_forgetting_a_block_forgets_the_descendants_tracked_through_it") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  record(pruner, kStreamA, {1, 2, 3});
  record(pruner, kStreamA, {1, 2, 4, 5});
  record(pruner, kStreamA, {1, 6});
  CHECK(pruner.tracked_blocks(kStreamA) == 6);

  const auto block_2 = external_hashes({1}, {2});
  CHECK(pruner.forget_blocks(kStreamA, block_2) == 4);  // 2, 3, 4, 5
  CHECK(pruner.tracked_blocks(kStreamA) == 2);
  CHECK(pruner.forget_blocks(kStreamA, block_2) == 0);  // already gone

  // The forgotten suffix is new again and chains under the surviving block 1.
  const auto again = record(pruner, kStreamA, {1, 2, 3});
  REQUIRE(again.store.has_value());
  CHECK(stored(*again.store).parent_hash == external_hashes({}, {1}).back());
  CHECK(stored(*again.store).blocks.size() == 2);
  CHECK(pruner.tracked_blocks() == 4);
  CHECK(pruner.next_expiry().has_value());
}

TEST_CASE("decision_pruner_removing_a_stream_or_worker_forgets_everything_it_tracked") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  record(pruner, kStreamA, {1, 2, 3});
  record(pruner, kStreamB, {1, 2});
  record(pruner, kStreamC, {1});

  CHECK(pruner.remove_stream(kStreamB) == 2);
  CHECK(pruner.tracked_blocks(kStreamB) == 0);
  CHECK(pruner.tracked_blocks() == 4);
  CHECK(pruner.remove_stream(kStreamB) == 0);

  record(pruner, kStreamB, {8});
  CHECK(pruner.remove_worker(1) == 4);  // both ranks of worker 1
  CHECK(pruner.tracked_blocks() == 1);
  CHECK(pruner.tracked_blocks(kStreamC) == 1);

  // Nothing of the removed streams expires later: they were forgotten, not just hidden.
  clock.advance(10s);
  const auto events = pruner.collect_expired();
  REQUIRE(events.size() == 1);
  CHECK(events[0].stream() == kStreamC);

  // After a removal the next decision starts again from the root.
  const auto fresh = record(pruner, kStreamA, {1, 2});
  REQUIRE(fresh.store.has_value());
  CHECK_FALSE(stored(*fresh.store).parent_hash.has_value());
}

TEST_CASE("decision_pruner_removal_through_the_lane_clears_blocks_still_queued_behind_it") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  std::vector<RouterEvent> lane_queue;  // not applied yet, as if the lane were busy
  const auto enqueue = [&lane_queue](RouterEvent&& event) { lane_queue.push_back(std::move(event)); };
  const Decision d = decision({1, 2});
  pruner.record_decision(kStreamA, d.locals, d.sequence, enqueue);
  pruner.record_decision(kStreamB, d.locals, d.sequence, enqueue);
  pruner.record_decision(kStreamC, d.locals, d.sequence, enqueue);

  CHECK(pruner.remove_worker(1, enqueue) == 4);
  CHECK(pruner.remove_stream(kStreamB, enqueue) == 0);  // nothing tracked: no event
  REQUIRE(lane_queue.size() == 5);
  CHECK(kvidx::kind_of(lane_queue[3].event.data) == kvidx::EventKind::cleared);
  CHECK(lane_queue[3].stream() == kStreamA);
  CHECK(lane_queue[4].stream() == kStreamB);

  ReferenceIndex index;
  for (const auto& event : lane_queue) index.apply(event);
  CHECK(index.block_count(kStreamA) == 0);
  CHECK(index.block_count(kStreamB) == 0);
  CHECK(index.block_count(kStreamC) == 2);
  CHECK(index.total_blocks() == pruner.tracked_blocks());

  lane_queue.clear();
  CHECK(pruner.remove_stream(kStreamC, enqueue) == 2);
  REQUIRE(lane_queue.size() == 1);
  CHECK(lane_queue[0].event.event_id == 5);
}

TEST_CASE("decision_pruner_stops_a_chain_at_a_hash_it_tracks_under_another_parent") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  record(pruner, kStreamA, {1, 2});
  const auto tracked = external_hashes({}, {1, 2});
  // Malformed input: a new root block followed by a hash that already sits under block 1.
  const std::vector<LocalBlockHash> locals = local_hashes({9, 2, 3});
  const std::vector<ExternalSequenceBlockHash> sequence{ExternalSequenceBlockHash{999}, tracked[1],
                                                        ExternalSequenceBlockHash{1000}};
  const auto result = pruner.record_decision(kStreamA, locals, sequence);
  REQUIRE(result.store.has_value());
  REQUIRE(stored(*result.store).blocks.size() == 1);
  CHECK(stored(*result.store).blocks[0].block_hash == ExternalSequenceBlockHash{999});
  CHECK(pruner.tracked_blocks(kStreamA) == 3);

  // A decision starting at a non-root tracked block records nothing.
  const std::vector<ExternalSequenceBlockHash> from_middle{tracked[1]};
  const auto middle = pruner.record_decision(kStreamA, local_hashes({2}), from_middle);
  CHECK_FALSE(middle.store.has_value());
  CHECK(middle.renewed_blocks == 0);
  CHECK(pruner.tracked_blocks(kStreamA) == 3);
}

TEST_CASE("decision_pruner_rejects_mismatched_lengths_and_ignores_empty_decisions") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  const auto locals = local_hashes({1, 2});
  const auto sequence = external_hashes({}, {1});
  const auto mismatch = pruner.record_decision(kStreamA, locals, sequence);
  CHECK(mismatch.status == DecisionStatus::length_mismatch);
  CHECK_FALSE(mismatch.store.has_value());

  const auto empty = pruner.record_decision(kStreamA, {}, {});
  CHECK(empty.status == DecisionStatus::ok);
  CHECK_FALSE(empty.store.has_value());
  CHECK(pruner.tracked_blocks() == 0);
  // The rejected calls consumed no event id.
  CHECK(record(pruner, kStreamA, {1}).store->event.event_id == 0);
}

TEST_CASE("decision_pruner_events_applied_to_a_reference_index_give_the_expected_scores") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(30s), clock.as_clock());
  ReferenceIndex index;
  const auto sink = [&index](RouterEvent&& event) { index.apply(event); };
  auto route = [&](WorkerWithDpRank stream, const Hashes& locals) {
    const Decision d = decision(locals);
    return pruner.record_decision(stream, d.locals, d.sequence, sink);
  };

  CHECK(index.scores(local_hashes({1, 2, 3})).empty());
  CHECK_FALSE(route(kStreamA, {1, 2}).store.has_value());  // handed to the sink instead
  route(kStreamB, {1, 2, 3, 4});
  clock.advance(20s);
  route(kStreamA, {1, 2, 3});  // extends A and renews 1, 2

  CHECK(score_of(index, kStreamA, {1, 2, 3, 4}) == 3);
  CHECK(score_of(index, kStreamB, {1, 2, 3, 4}) == 4);
  CHECK(index.block_count(kStreamA) == pruner.tracked_blocks(kStreamA));
  CHECK(index.block_count(kStreamB) == pruner.tracked_blocks(kStreamB));

  clock.advance(10s);  // B's chain reaches its TTL; A's was renewed
  CHECK(pruner.collect_expired(sink) == 4);
  CHECK(score_of(index, kStreamA, {1, 2, 3, 4}) == 3);
  CHECK(score_of(index, kStreamB, {1, 2, 3, 4}) == 0);
  CHECK(index.block_count(kStreamB) == 0);

  clock.advance(20s);
  CHECK(pruner.collect_expired(sink) == 3);
  CHECK(index.scores(local_hashes({1, 2, 3})).empty());
  CHECK(index.total_blocks() == 0);
  CHECK(pruner.tracked_blocks() == 0);
}

TEST_CASE("decision_pruner_partial_expiry_leaves_the_renewed_prefix_scoring") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(10s), clock.as_clock());
  ReferenceIndex index;
  const auto sink = [&index](RouterEvent&& event) { index.apply(event); };
  const Decision long_chain = decision({1, 2, 3, 4});
  const Decision short_chain = decision({1, 2});

  pruner.record_decision(kStreamA, long_chain.locals, long_chain.sequence, sink);
  clock.advance(6s);
  pruner.record_decision(kStreamA, short_chain.locals, short_chain.sequence, sink);
  clock.advance(4s);
  pruner.collect_expired(sink);
  CHECK(score_of(index, kStreamA, {1, 2, 3, 4}) == 2);
  CHECK(index.block_count(kStreamA) == 2);
  CHECK(pruner.tracked_blocks(kStreamA) == 2);

  // The expired suffix comes back as a Stored event the index accepts (its parent survived).
  pruner.record_decision(kStreamA, long_chain.locals, long_chain.sequence, sink);
  CHECK(score_of(index, kStreamA, {1, 2, 3, 4}) == 4);
}

TEST_CASE("decision_pruner_size_cap_pruning_keeps_the_reference_index_consistent") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(1000s, 20, 0.5), clock.as_clock());
  ReferenceIndex index;
  const auto sink = [&index](RouterEvent&& event) { index.apply(event); };
  for (std::uint64_t i = 0; i < 8; ++i) {
    const Decision d = decision({100, 200 + i, 300 + i});  // shared first block, branches below it
    pruner.record_decision(WorkerWithDpRank{i % 2, 0}, d.locals, d.sequence, sink);
    clock.advance(1s);
  }
  REQUIRE(pruner.tracked_blocks() == 18);
  const Decision big = decision({1, 2, 3, 4, 5});
  pruner.record_decision(WorkerWithDpRank{0, 0}, big.locals, big.sequence, sink);
  REQUIRE(pruner.over_capacity());

  pruner.collect_expired(sink);
  CHECK(pruner.tracked_blocks() <= 10);
  CHECK(pruner.tracked_blocks() == index.total_blocks());
  CHECK(pruner.tracked_blocks(WorkerWithDpRank{0, 0}) == index.block_count(WorkerWithDpRank{0, 0}));
  CHECK(pruner.tracked_blocks(WorkerWithDpRank{1, 0}) == index.block_count(WorkerWithDpRank{1, 0}));
  // The newest decision survives whole.
  CHECK(score_of(index, WorkerWithDpRank{0, 0}, {1, 2, 3, 4, 5}) == 5);
}

TEST_CASE("decision_pruner_concurrent_record_and_collect_stay_consistent_with_the_applied_events") {
  ManualClock clock;
  RoutingDecisionPruner pruner(config_with(5s, 200, 0.8), clock.as_clock());
  std::mutex log_mutex;
  std::vector<RouterEvent> log;  // the order a lane would receive them in
  const auto sink = [&](RouterEvent&& event) {
    std::lock_guard lock(log_mutex);
    log.push_back(std::move(event));
  };

  constexpr int kRouters = 3;
  constexpr int kDecisionsPerRouter = 400;
  std::atomic<bool> routers_done{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRouters; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < kDecisionsPerRouter; ++i) {
        const auto stream = WorkerWithDpRank{static_cast<kvidx::WorkerId>(i % 4), static_cast<kvidx::DpRank>(r % 2)};
        Hashes chain{static_cast<std::uint64_t>(i % 5)};
        for (int depth = 0; depth < 1 + i % 6; ++depth) chain.push_back(static_cast<std::uint64_t>((i + depth) % 7));
        const Decision d = decision(chain);
        pruner.record_decision(stream, d.locals, d.sequence, sink);
        if (i % 50 == 0) clock.advance(1s);
      }
    });
  }
  threads.emplace_back([&] {
    while (!routers_done.load(std::memory_order_acquire)) {
      pruner.collect_expired(sink);
      std::this_thread::yield();
    }
  });
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) {
      (void)pruner.tracked_blocks();
      (void)pruner.next_expiry();
      if (i % 40 == 0) pruner.remove_stream(WorkerWithDpRank{3, 1});
      std::this_thread::yield();
    }
  });
  for (int r = 0; r < kRouters; ++r) threads[static_cast<std::size_t>(r)].join();
  routers_done.store(true, std::memory_order_release);
  for (std::size_t t = kRouters; t < threads.size(); ++t) threads[t].join();
  pruner.collect_expired(sink);

  // Replaying the events in the order produced reproduces the pruner's bookkeeping exactly,
  // except for streams removed silently (their events stay in the log, as a Cleared would).
  std::size_t removed_events = 0;
  for (const auto& event : log) removed_events += kvidx::kind_of(event.event.data) == kvidx::EventKind::removed;
  CHECK(removed_events > 0);  // expiry and the size cap both ran while routers were recording

  ReferenceIndex index;
  std::uint64_t last_id = 0;
  bool first = true;
  for (const auto& event : log) {
    if (!first) CHECK(event.event.event_id > last_id);
    first = false;
    last_id = event.event.event_id;
    index.apply(event);
  }
  index.remove_stream(WorkerWithDpRank{3, 1});
  pruner.remove_stream(WorkerWithDpRank{3, 1});

  CHECK(pruner.tracked_blocks() <= 200);
  std::size_t per_stream_total = 0;
  for (kvidx::WorkerId w = 0; w < 4; ++w) {
    for (kvidx::DpRank rank = 0; rank < 2; ++rank) {
      const WorkerWithDpRank stream{w, rank};
      if (stream == WorkerWithDpRank{3, 1}) continue;
      CHECK(pruner.tracked_blocks(stream) == index.block_count(stream));
      per_stream_total += pruner.tracked_blocks(stream);
    }
  }
  CHECK(per_stream_total == pruner.tracked_blocks());
  CHECK(index.total_blocks() == pruner.tracked_blocks());
}
