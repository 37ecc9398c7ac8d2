// ZmqEventBridge against a real ZMQ publisher and replay socket (FakeVllmEngine) on 127.0.0.1.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "bridge/router_event_sink.h"
#include "bridge/zmq_event_bridge.h"
#include "libindexer/hashing.h"
#include "libindexer/intake/stream_sequencer.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/bridge/fake_vllm_engine.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::bridge;
using namespace kvidx::testing;
using namespace std::chrono_literals;

namespace {

constexpr WorkerId kWorker = 7;
constexpr std::uint32_t kBlockSize = 4;

// Records every delivered RouterEvent and optionally forwards to another sink.
class RecordingSink final : public RouterEventSink {
 public:
  explicit RecordingSink(RouterEventSink* next = nullptr) : next_(next) {}
  SinkStatus deliver(std::span<const RouterEvent> events) override {
    {
      std::lock_guard lock(mutex_);
      events_.insert(events_.end(), events.begin(), events.end());
    }
    return next_ ? next_->deliver(events) : SinkStatus{};
  }
  std::vector<RouterEvent> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  RouterEventSink* next_;
  mutable std::mutex mutex_;
  std::vector<RouterEvent> events_;
};

ZmqBridgeConfig config_for(const FakeVllmEngine& engine, bool use_replay) {
  ZmqBridgeConfig c;
  c.endpoint = engine.endpoint();
  if (use_replay) c.replay_endpoint = engine.replay_endpoint();
  c.conversion.worker_id = kWorker;
  c.conversion.block_size = kBlockSize;
  c.replay_timeout = 2s;
  return c;
}

EngineStored stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent, std::uint32_t first_token) {
  EngineStored s;
  s.tokens = tokens(first_token, static_cast<std::uint32_t>(hashes.size()) * kBlockSize);
  s.hashes = std::move(hashes);
  s.parent = parent;
  s.block_size = kBlockSize;
  return s;
}

std::vector<LocalBlockHash> query_for(std::uint32_t first_token, std::uint32_t blocks) {
  return compute_block_hashes(tokens(first_token, blocks * kBlockSize), kBlockSize);
}

std::uint32_t score_of(const LaneIndexer& indexer, const std::vector<LocalBlockHash>& query) {
  const auto scores = indexer.find_matches(query);
  const auto it = scores.scores.find({kWorker, 0});
  return it == scores.scores.end() ? 0 : it->second;
}

std::vector<std::uint64_t> ids_of(const std::vector<RouterEvent>& events) {
  std::vector<std::uint64_t> out;
  for (const auto& e : events) out.push_back(e.event.event_id);
  return out;
}

std::vector<EventKind> kinds_of(const std::vector<RouterEvent>& events) {
  std::vector<EventKind> out;
  for (const auto& e : events) out.push_back(kind_of(e.event.data));
  return out;
}

}  // namespace

TEST_CASE("stored_removed_and_cleared_reach_the_lane_indexer_in_engine_order") {
  FakeVllmEngine engine(false);
  LaneIndexer indexer(2);
  LaneIndexerSink to_indexer(indexer);
  RecordingSink sink(&to_indexer);
  ZmqEventBridge bridge(config_for(engine, false), sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();

  // Tokens 1..8 as blocks 101, 102; then 9..12 as block 103 under 102.
  engine.publish(0, pack_batch({stored({101, 102}, std::nullopt, 1)}));
  engine.publish(1, pack_batch({stored({103}, 102, 9)}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 2; }));
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(score_of(indexer, query_for(1, 3)) == 3);

  engine.publish(2, pack_batch({EngineRemoved{{103}}}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 3; }));
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(score_of(indexer, query_for(1, 3)) == 2);

  engine.publish(3, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 4; }));
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(score_of(indexer, query_for(1, 3)) == 0);

  const auto events = sink.events();
  CHECK(ids_of(events) == std::vector<std::uint64_t>{0, 1, 2, 3});
  CHECK(kinds_of(events) ==
        std::vector<EventKind>{EventKind::stored, EventKind::stored, EventKind::removed, EventKind::cleared});
  const auto s = bridge.stats();
  CHECK(s.gaps == 0);
  CHECK(s.malformed_frames == 0);
  CHECK(s.router_events == 4);
}

TEST_CASE("a_gap_is_filled_by_replay_and_buffered_live_batches_follow_in_order") {
  for (ReplayReplyShape shape : {ReplayReplyShape::with_topic, ReplayReplyShape::without_topic}) {
    CAPTURE(static_cast<int>(shape));
    FakeVllmEngine engine(true, "kv-events", shape);
    LaneIndexer indexer(2);
    LaneIndexerSink to_indexer(indexer);
    RecordingSink sink(&to_indexer);
    ZmqEventBridge bridge(config_for(engine, true), sink);
    REQUIRE(bridge.start().ok());
    engine.wait_for_subscriber();

    engine.publish(0, pack_batch({stored({101, 102}, std::nullopt, 1)}));
    REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 1; }));
    // Missed by the subscriber: a removal and a store. Only the replay socket has them.
    engine.publish(1, pack_batch({EngineRemoved{{102}}}), false);
    engine.publish(2, pack_batch({stored({201}, 101, 21)}), false);
    engine.publish(3, pack_batch({stored({301}, 201, 31)}));
    engine.publish(4, pack_batch({EngineRemoved{{301}}, stored({302}, 201, 41)}));

    REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 5; }));
    const auto s = bridge.stats();
    CHECK(s.gaps == 1);
    CHECK(s.missing_batches == 2);
    CHECK(s.replays_requested == 1);
    CHECK(s.replayed_batches == 2);
    CHECK(s.unrecovered_batches == 0);
    CHECK(s.replay_failures == 0);
    CHECK(engine.replay_requests() == 1);

    const auto events = sink.events();
    CHECK(ids_of(events) == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5});
    CHECK(kinds_of(events) == std::vector<EventKind>{EventKind::stored, EventKind::removed, EventKind::stored,
                                                     EventKind::stored, EventKind::removed, EventKind::stored});
    REQUIRE(events.size() == 6);
    CHECK(std::get<KvCacheStoreData>(events[2].event.data).blocks[0].block_hash.value == 201);

    REQUIRE(indexer.flush() == IndexerStatus::ok);
    CHECK(score_of(indexer, query_for(1, 2)) == 1);  // 102 was removed by the replayed batch
    auto path = query_for(1, 1);
    for (auto h : query_for(21, 1)) path.push_back(h);
    for (auto h : query_for(41, 1)) path.push_back(h);
    CHECK(score_of(indexer, path) == 3);  // 101 -> 201 -> 302
  }
}

TEST_CASE("a_replay_that_no_longer_has_the_whole_range_counts_the_rest_as_lost") {
  FakeVllmEngine engine(true);
  RecordingSink sink;
  ZmqEventBridge bridge(config_for(engine, true), sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();

  engine.publish(0, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 1; }));
  engine.publish(1, pack_batch({EngineCleared{}}), false);
  engine.publish(2, pack_batch({EngineCleared{}}), false);
  engine.evict_history_before(2);  // the engine's bounded buffer dropped seq 1
  engine.publish(3, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 3; }));
  const auto s = bridge.stats();
  CHECK(s.replayed_batches == 1);
  CHECK(s.unrecovered_batches == 1);
  CHECK(ids_of(sink.events()) == std::vector<std::uint64_t>{0, 2, 3});  // id 1 skipped for seq 1
}

TEST_CASE("a_gap_without_replay_is_counted_and_shows_downstream_as_an_event_id_gap") {
  for (bool clear_on_gap : {false, true}) {
    CAPTURE(clear_on_gap);
    FakeVllmEngine engine(false);
    RecordingSink sink;
    ZmqBridgeConfig config = config_for(engine, false);
    config.clear_on_gap = clear_on_gap;
    ZmqEventBridge bridge(config, sink);
    REQUIRE(bridge.start().ok());
    engine.wait_for_subscriber();

    engine.publish(0, pack_batch({stored({101}, std::nullopt, 1)}));
    engine.publish(1, pack_batch({EngineRemoved{{101}}}), false);
    engine.publish(2, pack_batch({EngineCleared{}}), false);
    engine.publish(3, pack_batch({stored({102}, std::nullopt, 5)}));
    REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 2; }));
    const auto s = bridge.stats();
    CHECK(s.gaps == 1);
    CHECK(s.missing_batches == 2);
    CHECK(s.unrecovered_batches == 2);
    CHECK(s.replays_requested == 0);

    const auto events = sink.events();
    if (clear_on_gap) {
      CHECK(ids_of(events) == std::vector<std::uint64_t>{0, 3, 4});
      CHECK(kinds_of(events) == std::vector<EventKind>{EventKind::stored, EventKind::cleared, EventKind::stored});
    } else {
      CHECK(ids_of(events) == std::vector<std::uint64_t>{0, 3});
    }
    // kvidx's sequencer sees the loss as a gap of (at least) the lost batches.
    StreamSequencer sequencer;
    CHECK(sequencer.observe(events[0].stream(), events[0].event.event_id).verdict == SequenceVerdict::apply);
    const auto d = sequencer.observe(events[1].stream(), events[1].event.event_id);
    CHECK(d.verdict == SequenceVerdict::gap);
    CHECK(d.missing == 2);
  }
}

TEST_CASE("malformed_frames_are_counted_and_the_stream_continues") {
  FakeVllmEngine engine(false);
  RecordingSink sink;
  ZmqEventBridge bridge(config_for(engine, false), sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();

  engine.publish(0, pack_batch({EngineCleared{}}));
  engine.send_raw({"kv-events", FakeVllmEngine::seq_bytes(1)});                // two frames
  engine.send_raw({"kv-events", std::string("\x00\x01", 2), pack_batch({})});  // 2-byte seq
  engine.publish(1, std::string("\x93\xc1\xc1\xc1", 4));                       // undecodable
  engine.publish(2, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 2; }));
  const auto s = bridge.stats();
  CHECK(s.malformed_frames == 3);
  CHECK(s.gaps == 0);  // the undecodable batch was received: not a sequence gap
  CHECK(ids_of(sink.events()) == std::vector<std::uint64_t>{0, 2});  // its id is skipped
}

TEST_CASE("an_engine_restart_clears_the_stream_before_its_new_batches") {
  FakeVllmEngine engine(false);
  RecordingSink sink;
  ZmqEventBridge bridge(config_for(engine, false), sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();

  engine.publish(0, pack_batch({stored({101}, std::nullopt, 1)}));
  engine.publish(1, pack_batch({stored({102}, 101, 5)}));
  engine.publish(0, pack_batch({stored({901}, std::nullopt, 1)}));  // new engine process
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 3; }));
  CHECK(bridge.stats().restarts == 1);
  const auto events = sink.events();
  CHECK(ids_of(events) == std::vector<std::uint64_t>{0, 1, 2, 3});
  CHECK(kinds_of(events) ==
        std::vector<EventKind>{EventKind::stored, EventKind::stored, EventKind::cleared, EventKind::stored});
}

TEST_CASE("a_late_start_catches_up_from_the_replay_buffer") {
  FakeVllmEngine engine(true);
  engine.publish(0, pack_batch({stored({101}, std::nullopt, 1)}), false);  // before the bridge ran
  engine.publish(1, pack_batch({stored({102}, 101, 5)}), false);
  RecordingSink sink;
  ZmqEventBridge bridge(config_for(engine, true), sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();
  engine.publish(2, pack_batch({stored({103}, 102, 9)}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 3; }));
  const auto s = bridge.stats();
  CHECK(s.gaps == 0);
  CHECK(s.replayed_batches == 2);
  CHECK(ids_of(sink.events()) == std::vector<std::uint64_t>{0, 1, 2});
}

TEST_CASE("a_replay_socket_that_never_answers_times_out_and_live_batches_still_flow") {
  FakeVllmEngine engine(false);
  // A ROUTER that accepts the connection but never replies.
  zmq::context_t context;
  zmq::socket_t silent(context, zmq::socket_type::router);
  silent.set(zmq::sockopt::linger, 0);
  silent.bind("tcp://127.0.0.1:*");
  RecordingSink sink;
  ZmqBridgeConfig config = config_for(engine, false);
  config.replay_endpoint = silent.get(zmq::sockopt::last_endpoint);
  config.replay_timeout = 200ms;
  config.catch_up_on_start = false;
  ZmqEventBridge bridge(config, sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();

  engine.publish(0, pack_batch({EngineCleared{}}));
  engine.publish(2, pack_batch({EngineCleared{}}));
  engine.publish(3, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 3; }));
  const auto s = bridge.stats();
  CHECK(s.replay_failures == 1);
  CHECK(s.unrecovered_batches == 1);
  CHECK(ids_of(sink.events()) == std::vector<std::uint64_t>{0, 2, 3});
}

namespace {

// Six batches where each dropped one matters to the final scores: seq 1 removes 102, seq 4
// removes 301 and stores 302, the parent of seq 5's block.
std::vector<std::string> two_gap_script() {
  return {
      pack_batch({stored({101, 102}, std::nullopt, 1)}),
      pack_batch({EngineRemoved{{102}}}),
      pack_batch({stored({201}, 101, 21)}),
      pack_batch({stored({301}, 201, 31)}),
      pack_batch({EngineRemoved{{301}}, stored({302}, 201, 41)}),
      pack_batch({stored({401}, 302, 51)}),
  };
}

std::vector<std::uint32_t> two_gap_script_scores(const LaneIndexer& indexer) {
  const auto path = [](std::initializer_list<std::uint32_t> firsts) {
    std::vector<LocalBlockHash> q;
    for (std::uint32_t first : firsts) {
      for (auto h : query_for(first, 1)) q.push_back(h);
    }
    return q;
  };
  return {score_of(indexer, query_for(1, 2)), score_of(indexer, path({1, 21, 31})),
          score_of(indexer, path({1, 21, 41, 51}))};
}

// The scores of the script delivered without a drop.
std::vector<std::uint32_t> two_gap_script_scores_without_drops() {
  FakeVllmEngine engine(false);
  LaneIndexer indexer(2);
  LaneIndexerSink to_indexer(indexer);
  ZmqEventBridge bridge(config_for(engine, false), to_indexer);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();
  const auto script = two_gap_script();
  for (std::uint64_t seq = 0; seq < script.size(); ++seq) engine.publish(seq, script[seq]);
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == script.size(); }));
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  return two_gap_script_scores(indexer);
}

// Publishes the script with seq 1 dropped (the bridge asks for a replay, which the engine holds)
// and seq 4 dropped while that replay is held; `before_release` runs just before the engine answers.
void publish_with_a_gap_during_the_replay(FakeVllmEngine& engine, const ZmqEventBridge& bridge,
                                          const std::function<void()>& before_release) {
  const auto script = two_gap_script();
  engine.publish(0, script[0]);
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 1; }));
  engine.publish(1, script[1], false);
  engine.publish(2, script[2]);
  REQUIRE(wait_until([&] { return engine.replay_requests() == 1; }));
  engine.publish(3, script[3]);
  engine.publish(4, script[4], false);
  engine.publish(5, script[5]);
  // Seqs 2, 3 and 5 arrived while the replay was under way (buffered by the bridge).
  REQUIRE(wait_until([&] { return bridge.stats().frames == 4; }));
  CHECK(bridge.stats().replaying);
  before_release();
  engine.release_replays();
  REQUIRE(wait_until([&] {
    const auto s = bridge.stats();
    return s.have_last_seq && s.last_seq == 5 && !s.replaying;
  }));
}

}  // namespace

TEST_CASE("a_gap_found_while_a_replay_runs_is_replayed_too") {
  const auto expected_scores = two_gap_script_scores_without_drops();
  CHECK(expected_scores == std::vector<std::uint32_t>{1, 2, 4});
  for (ReplaySnapshot snapshot : {ReplaySnapshot::at_request, ReplaySnapshot::at_answer}) {
    CAPTURE(static_cast<int>(snapshot));
    FakeVllmEngine engine(true);
    engine.hold_replays(snapshot);
    LaneIndexer indexer(2);
    LaneIndexerSink to_indexer(indexer);
    RecordingSink sink(&to_indexer);
    ZmqEventBridge bridge(config_for(engine, true), sink);
    REQUIRE(bridge.start().ok());
    engine.wait_for_subscriber();
    publish_with_a_gap_during_the_replay(engine, bridge, [] {});

    const auto s = bridge.stats();
    CHECK(s.batches_delivered == 6);
    CHECK(s.replayed_batches == 2);
    CHECK(s.unrecovered_batches == 0);
    CHECK(s.gaps == 2);
    CHECK(s.missing_batches == 2);
    CHECK(s.replay_failures == 0);
    CHECK(s.duplicate_batches == 0);
    // An answer read when the engine serves it holds seq 4 already: one replay fills both gaps.
    const std::uint64_t replays = snapshot == ReplaySnapshot::at_answer ? 1 : 2;
    CHECK(s.replays_requested == replays);
    CHECK(engine.replay_requests() == replays);
    CHECK(ids_of(sink.events()) == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6});
    REQUIRE(indexer.flush() == IndexerStatus::ok);
    CHECK(two_gap_script_scores(indexer) == expected_scores);
  }
}

TEST_CASE("a_gap_found_while_a_replay_runs_and_gone_from_the_engine_buffer_is_lost_once") {
  FakeVllmEngine engine(true);
  engine.hold_replays(ReplaySnapshot::at_request);  // the first answer cannot hold seq 4
  RecordingSink sink;
  ZmqEventBridge bridge(config_for(engine, true), sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();
  // The engine's bounded buffer drops seqs 1..4 after the first request was read (seq 1 is in
  // its answer already).
  publish_with_a_gap_during_the_replay(engine, bridge, [&] { engine.evict_history_before(5); });

  const auto s = bridge.stats();
  CHECK(s.batches_delivered == 5);
  CHECK(s.replayed_batches == 1);
  CHECK(s.unrecovered_batches == 1);
  CHECK(s.gaps == 2);
  CHECK(s.missing_batches == 2);
  CHECK(s.replays_requested == 2);
  CHECK(engine.replay_requests() == 2);
  CHECK(s.replay_failures == 0);
  CHECK(ids_of(sink.events()) == std::vector<std::uint64_t>{0, 1, 2, 3, 5});  // id 4 skipped for seq 4
}

TEST_CASE("a_run_of_batches_lost_while_a_replay_runs_is_one_gap_filled_by_its_answer") {
  FakeVllmEngine engine(true);
  engine.hold_replays(ReplaySnapshot::at_answer);
  RecordingSink sink;
  ZmqEventBridge bridge(config_for(engine, true), sink);
  REQUIRE(bridge.start().ok());
  engine.wait_for_subscriber();

  engine.publish(0, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 1; }));
  engine.publish(1, pack_batch({EngineCleared{}}), false);
  engine.publish(2, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return engine.replay_requests() == 1; }));
  engine.publish(3, pack_batch({EngineCleared{}}));
  engine.publish(4, pack_batch({EngineCleared{}}), false);
  engine.publish(5, pack_batch({EngineCleared{}}), false);
  engine.publish(6, pack_batch({EngineCleared{}}));
  engine.publish(7, pack_batch({EngineCleared{}}), false);
  engine.publish(8, pack_batch({EngineCleared{}}));
  REQUIRE(wait_until([&] { return bridge.stats().frames == 5; }));  // seqs 0, 2, 3, 6, 8
  engine.release_replays();
  REQUIRE(wait_until([&] { return bridge.stats().batches_delivered == 9; }));
  const auto s = bridge.stats();
  CHECK(s.gaps == 3);  // before 2, before 6 (4 and 5), before 8
  CHECK(s.missing_batches == 4);
  CHECK(s.replayed_batches == 4);
  CHECK(s.unrecovered_batches == 0);
  CHECK(s.replays_requested == 1);
  CHECK(s.duplicate_batches == 0);
  CHECK(ids_of(sink.events()) == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
}
