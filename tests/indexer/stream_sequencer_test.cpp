#include <doctest/doctest.h>

#include "libindexer/intake/stream_sequencer.h"

using namespace kvidx;

namespace {
constexpr WorkerWithDpRank kA{1, 0};
constexpr WorkerWithDpRank kB{1, 1};
}  // namespace

TEST_CASE("in_order_events_are_applied_and_advance_the_watermark") {
  StreamSequencer seq;
  for (std::uint64_t id = 0; id < 5; ++id) {
    const auto d = seq.observe(kA, id);
    CHECK(d.verdict == SequenceVerdict::apply);
    CHECK(d.should_apply());
    CHECK_FALSE(d.clear_stream_first);
  }
  CHECK(seq.watermark(kA) == 4u);
  CHECK(seq.counters().applied == 5);
  CHECK_FALSE(seq.watermark(kB).has_value());
}

TEST_CASE("first_event_of_a_stream_is_applied_whatever_its_id") {
  StreamSequencer seq;
  CHECK(seq.observe(kA, 1000).verdict == SequenceVerdict::apply);
  CHECK(seq.observe(kA, 1001).verdict == SequenceVerdict::apply);
  CHECK(seq.counters().gaps == 0);
}

TEST_CASE("redelivered_events_are_skipped_idempotently") {
  StreamSequencer seq;
  for (std::uint64_t id = 0; id < 4; ++id) seq.observe(kA, id);
  for (std::uint64_t id : {1, 2, 3, 3}) {
    const auto d = seq.observe(kA, id);
    CHECK(d.verdict == SequenceVerdict::duplicate);
    CHECK_FALSE(d.should_apply());
  }
  CHECK(seq.watermark(kA) == 3u);
  CHECK(seq.counters().duplicates == 4);
  CHECK(seq.observe(kA, 4).verdict == SequenceVerdict::apply);
}

TEST_CASE("a_duplicate_of_event_zero_before_any_progress_is_not_a_reset") {
  StreamSequencer seq;
  seq.observe(kA, 0);
  CHECK(seq.observe(kA, 0).verdict == SequenceVerdict::duplicate);
}

TEST_CASE("gaps_are_counted_and_reported_once_per_stream") {
  StreamSequencer seq;
  seq.observe(kA, 0);
  auto first = seq.observe(kA, 5);
  CHECK(first.verdict == SequenceVerdict::gap);
  CHECK(first.should_apply());
  CHECK(first.missing == 4);
  CHECK(first.first_gap_in_stream);
  CHECK_FALSE(first.clear_stream_first);
  auto second = seq.observe(kA, 7);
  CHECK(second.verdict == SequenceVerdict::gap);
  CHECK(second.missing == 1);
  CHECK_FALSE(second.first_gap_in_stream);
  seq.observe(kB, 0);
  CHECK(seq.observe(kB, 2).first_gap_in_stream);  // another stream logs its own first gap
  CHECK(seq.counters().gaps == 3);
  CHECK(seq.counters().missing_events == 6);
  CHECK(seq.streams_with_gaps() == 2);
  CHECK(seq.watermark(kA) == 7u);
}

TEST_CASE("gap_with_clear_on_gap_asks_to_resync_the_stream") {
  StreamSequencer seq({.reset_distance = 0, .clear_on_gap = true});
  seq.observe(kA, 0);
  auto d = seq.observe(kA, 3);
  CHECK(d.verdict == SequenceVerdict::gap);
  CHECK(d.clear_stream_first);
}

TEST_CASE("event_id_back_to_zero_after_progress_is_a_publisher_restart") {
  StreamSequencer seq;
  for (std::uint64_t id = 0; id < 10; ++id) seq.observe(kA, id);
  auto d = seq.observe(kA, 0);
  CHECK(d.verdict == SequenceVerdict::reset);
  CHECK(d.clear_stream_first);
  CHECK(d.should_apply());
  CHECK(seq.watermark(kA) == 0u);
  CHECK(seq.observe(kA, 1).verdict == SequenceVerdict::apply);
  CHECK(seq.counters().resets == 1);
  // The other rank of the same worker is unaffected.
  seq.observe(kB, 3);
  CHECK(seq.watermark(kB) == 3u);
}

TEST_CASE("far_backwards_jump_is_a_reset_when_a_reset_distance_is_set") {
  StreamSequencer seq({.reset_distance = 100, .clear_on_gap = false});
  seq.observe(kA, 1000);
  CHECK(seq.observe(kA, 950).verdict == SequenceVerdict::duplicate);
  CHECK(seq.observe(kA, 10).verdict == SequenceVerdict::reset);
  CHECK(seq.watermark(kA) == 10u);
}

TEST_CASE("restore_and_forget_worker") {
  StreamSequencer seq;
  seq.restore(kA, 41);
  seq.restore(kB, 7);
  seq.restore({2, 0}, 3);
  CHECK(seq.observe(kA, 41).verdict == SequenceVerdict::duplicate);
  CHECK(seq.observe(kA, 42).verdict == SequenceVerdict::apply);
  auto marks = seq.watermarks();
  REQUIRE(marks.size() == 3);
  CHECK(marks[0] == std::pair<WorkerWithDpRank, std::uint64_t>{kA, 42});
  CHECK(marks[1] == std::pair<WorkerWithDpRank, std::uint64_t>{kB, 7});
  seq.forget_worker(1);
  CHECK(seq.watermarks().size() == 1);
  CHECK(seq.observe(kA, 0).verdict == SequenceVerdict::apply);  // a first event again
}

TEST_CASE("stream_limit_refuses_a_message_whose_new_streams_do_not_fit_and_forgetting_frees_places") {
  StreamSequencer seq(StreamSequencerOptions{0, false, 3});
  auto event = [](WorkerId worker, DpRank rank, std::uint64_t id) {
    RouterEvent e;
    e.worker_id = worker;
    e.event.dp_rank = rank;
    e.event.event_id = id;
    e.event.data = KvCacheClearData{};
    return e;
  };
  // Two new streams in one message (one of them twice): both fit, and are reserved.
  const std::vector<RouterEvent> first = {event(1, 0, 0), event(1, 1, 0), event(1, 0, 1)};
  CHECK_FALSE(seq.refuse_new_streams(first).has_value());
  CHECK(seq.stream_count() == 2);
  CHECK(seq.watermarks().empty());  // reserved, no event seen yet
  CHECK_FALSE(seq.watermark(kA).has_value());
  for (const auto& e : first) CHECK(seq.observe(e.stream(), e.event.event_id).verdict == SequenceVerdict::apply);
  CHECK(seq.watermarks().size() == 2);

  // Known streams always pass; two more new ones do not fit into the one place left: refused
  // whole, nothing reserved.
  const std::vector<RouterEvent> second = {event(1, 0, 2), event(2, 0, 0), event(3, 0, 0), event(3, 0, 1)};
  const auto refused = seq.refuse_new_streams(second);
  REQUIRE(refused.has_value());
  CHECK(*refused == std::vector<WorkerWithDpRank>{{2, 0}, {3, 0}});
  CHECK(seq.stream_count() == 2);
  CHECK_FALSE(seq.refuse_new_streams(std::vector<RouterEvent>{event(1, 1, 1)}).has_value());
  CHECK_FALSE(seq.refuse_new_streams(std::vector<RouterEvent>{event(2, 0, 0)}).has_value());
  CHECK(seq.stream_count() == 3);
  CHECK(seq.refuse_new_streams(std::vector<RouterEvent>{event(3, 0, 0)}).has_value());

  // Forgetting a worker frees its streams' places.
  seq.forget_worker(1);
  CHECK(seq.stream_count() == 1);
  CHECK_FALSE(seq.refuse_new_streams(second).has_value());  // (1,0), (3,0) new; (2,0) reserved
  CHECK(seq.stream_count() == 3);

  // No limit: nothing is ever refused or reserved.
  StreamSequencer open;
  CHECK_FALSE(open.refuse_new_streams(second).has_value());
  CHECK(open.stream_count() == 0);
}
