// Events into the lanes: every source ends in the same steps, under one dispatch lock.
//   JetStream: fetch thread (only pulls, so the server keeps streaming) -> bounded hand-off of
//   fetched batches -> dispatch thread: decode and subject check outside the lock (else dead
//   letter) -> under the lock: stream limit, EventIntake (libindexer/intake/: the rules offline replay uses too),
//   LaneIndexer::enqueue_events -> the acker thread's flush() barrier -> cumulative AckAll of the newest batch's last
//   message (ingest_jetstream.cpp; the data path in full is in service.h). Core: the subscription's delivery thread
//   decodes and hands events over in bursts. In-process sources (ZMQ bridges): already decoded, sequenced and handed
//   over as one batch.
// Rejected messages go to the dead-letter subject (dead_letters.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "libbus/nats_message.h"
#include "libbus/nats_subscription.h"
#include "libbus/ordered_stream_reader.h"
#include "libbus/service_context.h"
#include "libbus/snapshot_store.h"
#include "libcodec/query_codec.h"
#include "libindexer/intake/event_intake.h"

namespace kvidx::bus {

class Ingest {
 public:
  explicit Ingest(ServiceContext& ctx);
  Ingest(const Ingest&) = delete;
  Ingest& operator=(const Ingest&) = delete;

  // Before any source starts: replays a snapshot into the lanes and the sequencer.
  BusStatus restore(IndexSnapshot& snapshot);
  // The index, the watermarks and the stream sequence as one consistent cut (a barrier over
  // everything dispatched); false when the indexer is offline.
  bool capture(IndexSnapshot& snapshot);
  // Reads the events stream's state: the catch-up target for readiness and retention's trimmed
  // history (logged).
  BusStatus note_stream_state();
  // Starts the pull pipeline from the restored sequence + 1.
  BusStatus start_jetstream();
  BusStatus start_core();
  void open_local();  // ingest_local is accepted from now on

  // stop(): no more input (in-process sources refused, pulling and core deliveries stopped, what
  // was fetched dispatched), then the acker drained.
  void stop_receiving();
  void drain_acks();
  void close();  // after the final snapshot: the events consumer's reader

  BusStatus ingest_local(std::span<const RouterEvent> events);
  // kv.admin.remove_worker: the index, the sequencer and the active load, under the dispatch lock.
  IndexerStatus remove_worker(const RemoveWorkerRequest& request);

  bool wait_for_acked_sequence(std::uint64_t sequence, std::chrono::milliseconds timeout);
  // Readiness: latched once the acknowledged sequence reached the stream's end as it was at start
  // (core mode: once subscribed).
  bool caught_up() const { return caught_up_.load(); }
  std::string catching_up_reason();
  void fill_stats(ServiceStats& s);
  std::uint64_t restored_sequence();

 private:
  // Core mode, one per subscription, touched only by its nats.c delivery thread (and by stop()
  // after that thread is done): decoded events wait in `burst` until the subscription has no
  // more pending messages (or kCoreBurst events), then go to the lanes together, so a lane is
  // woken once per burst instead of once per event. Adds no latency when messages trickle in.
  static constexpr std::size_t kCoreBurst = 1024;
  struct CoreIngest {
    std::atomic<natsSubscription*> sub{nullptr};
    std::vector<RouterEvent> decoded;
    std::vector<RouterEvent> burst;
  };
  struct AckItem {
    Message last;  // the batch's last message; AckAll on it acknowledges the whole batch
    std::uint64_t sequence = 0;
    std::size_t events = 0;
  };

  // ingest.cpp: the steps every source shares.
  bool prepare_message(std::string_view subject, std::string_view data, std::vector<RouterEvent>& events);
  std::string refuse_over_stream_limit(std::span<const RouterEvent> events);
  void reject_over_stream_limit(std::string_view subject, std::string_view data, const std::vector<RouterEvent>& events,
                                const std::string& reason);
  std::size_t sequence_events(std::vector<RouterEvent>& events);
  void hand_to_lanes();
  std::size_t dispatch_events(std::vector<RouterEvent>& events);
  void on_core_message(CoreIngest& state, const Message& msg);
  void flush_core_burst(CoreIngest& state);
  // dead_letters.cpp
  void dead_letter(std::string_view subject, std::string_view data, std::string_view kind, const std::string& reason);
  void dead_letter_failed(DeadLetterFailure reason, std::string_view subject, const std::string& why);
  // ingest_jetstream.cpp: the three pipeline threads.
  void fetch_loop();
  void dispatch_loop();
  void ack_loop();
  void note_catch_up();

  ServiceContext& ctx_;
  ServiceCounters& counters_;
  std::string events_head_;  // "<prefix>.events."

  // ---- dispatch state (guarded by dispatch_mutex_) --------------------------------------------
  // NOTE: one mutex serialises everything that hands events to lanes (fetch thread, core
  // callbacks, in-process sources, admin removals, snapshot capture), so the sequencer and the
  // dispatched sequence are always consistent with what the lanes have been given.
  std::mutex dispatch_mutex_;
  EventIntake intake_;          // the event-ordering rules, shared with offline replay and the bridge's sinks
  StreamSequencer& sequencer_;  // intake_'s watermarks (stream limit, snapshots, removals)
  std::uint64_t dispatched_sequence_ = 0;
  std::uint64_t restored_sequence_ = 0;
  std::uint64_t history_trimmed_ = 0;  // set once at start
  std::vector<RouterEvent> to_lanes_;  // sequenced, not yet handed to the lanes
  std::size_t to_lanes_by_kind_[3] = {0, 0, 0};
  bool local_open_ = false;  // ingest_local is accepted

  // ---- core mode ------------------------------------------------------------------------------
  std::vector<Subscription> core_subs_;
  std::vector<std::unique_ptr<CoreIngest>> core_ingest_;

  // ---- JetStream pipeline (guarded by ack_mutex_) ---------------------------------------------
  std::optional<OrderedStreamReader> pull_;
  std::mutex ack_mutex_;
  std::condition_variable ack_cv_;       // acker wakes on new items / stop
  std::condition_variable space_cv_;     // fetcher wakes when in-flight drops
  std::condition_variable acked_cv_;     // waiters of wait_for_acked_sequence
  std::condition_variable dispatch_cv_;  // dispatcher wakes on fetched batches / stop
  std::deque<AckItem> ack_queue_;
  std::size_t inflight_events_ = 0;
  std::uint64_t acked_sequence_ = 0;
  std::uint64_t fetched_sequence_ = 0;  // the newest stream sequence fetched (kvidx_stream_lag_messages)
  bool stop_fetch_ = false;
  bool stop_dispatch_ = false;
  bool stop_acker_ = false;
  // Fetched batches waiting for the dispatch thread.
  static constexpr std::size_t kFetchedBatchesQueued = 2;
  std::deque<std::vector<Message>> fetched_;
  std::size_t fetched_messages_ = 0;
  std::uint64_t catch_up_target_ = 0;  // the events stream's end at start
  std::atomic<bool> caught_up_{false};
  // The events stream's messages not yet delivered to this replica's consumer, as the last fetched
  // message's metadata said (written by the fetch thread; the lag behind the stream is this plus
  // the fetched messages not yet acknowledged).
  std::atomic<std::uint64_t> stream_pending_{0};
  std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();

  std::thread fetch_thread_;
  std::thread dispatch_thread_;
  std::thread ack_thread_;
};

}  // namespace kvidx::bus
