// The JetStream pipeline of Ingest: fetch -> dispatch -> ack, three threads (see ingest.h).
#include <spdlog/spdlog.h>

#include "libbus/ingest.h"
#include "libindexer/thread_name.h"

namespace kvidx::bus {

using Clock = std::chrono::steady_clock;

BusStatus Ingest::note_stream_state() {
  auto state = ctx_.js->stream_state(ctx_.config.stream);
  if (!state.ok()) return state.error();
  {
    // NOTE: readiness waits for the stream's end as it is now, before the consumer starts; an
    // empty stream (nothing to deliver, even if its sequence is past 0) needs no catching up.
    std::uint64_t target = state.value().messages == 0 ? 0 : state.value().last_sequence;
    if (ctx_.subjects.shard() && target != 0) {
      // NOTE: a shard catches up with the last message of its own filter, not the stream's (a
      // message of another shard it never receives could never be acknowledged).
      auto last = ctx_.js->get_last_message(ctx_.config.stream, ctx_.subjects.events_filter());
      if (!last.ok() && last.error().status != NATS_NOT_FOUND) return last.error();
      target = last.ok() ? last.value().stored_sequence() : 0;
    }
    std::lock_guard lock(ack_mutex_);
    catch_up_target_ = target;
    note_catch_up();
  }
  std::lock_guard lock(dispatch_mutex_);
  if (state.value().first_sequence > restored_sequence_ + 1) {
    history_trimmed_ = state.value().first_sequence - restored_sequence_ - 1;
    spdlog::warn(
        "stream {} starts at sequence {} but this replica's state covers only up to {}: {} message(s) "
        "discarded by retention are not reflected (workers' later events repair their streams)",
        ctx_.config.stream, state.value().first_sequence, restored_sequence_, history_trimmed_);
  }
  return {};
}

BusStatus Ingest::start_jetstream() {
  const ServiceConfig& config = ctx_.config;
  ConsumerSpec spec;
  spec.durable = config.durable;
  spec.ack_all = true;
  // A shard's consumer delivers only its partition (see shard_spec.h); unsharded: every message.
  if (ctx_.subjects.shard()) spec.filter_subject = ctx_.subjects.events_filter();
  spec.max_ack_pending = static_cast<std::int64_t>(config.max_inflight_events) + config.fetch_batch;
  spec.start_sequence = restored_sequence() == 0 ? 0 : restored_sequence() + 1;
  auto p = OrderedStreamReader::open(ctx_.ingest_conn, *ctx_.js, config.stream, spec);
  if (!p.ok()) return p.error();
  pull_.emplace(std::move(p).value());
  fetch_thread_ = named_thread("kvidx-fetch", [this] { fetch_loop(); });
  dispatch_thread_ = named_thread("kvidx-dispatch", [this] { dispatch_loop(); });
  ack_thread_ = named_thread("kvidx-ack", [this] { ack_loop(); });
  return {};
}

// Stage 1: only pulls, so the server keeps streaming while stage 2 decodes and dispatches the
// previous batch. Hands batches over through a short bounded queue.
void Ingest::fetch_loop() {
  auto last_error_log = Clock::now() - std::chrono::seconds(10);
  while (true) {
    {
      std::unique_lock lock(ack_mutex_);
      space_cv_.wait(
          lock, [&] { return stop_fetch_ || inflight_events_ + fetched_messages_ < ctx_.config.max_inflight_events; });
      if (stop_fetch_) return;
    }
    auto batch = pull_->fetch(ctx_.config.fetch_batch, 250);
    // NOTE: the reader's counters are read only here, by the thread that drives it.
    counters_.consumer_resets_total->inc(pull_->resets() - counters_.consumer_resets_total->value());
    counters_.stream_holes_total->inc(pull_->holes() - counters_.stream_holes_total->value());
    if (!batch.ok()) {
      counters_.fetch_errors_total->inc();
      if (Clock::now() - last_error_log > std::chrono::seconds(5)) {
        spdlog::warn("fetch failed: {}", batch.error().message);
        last_error_log = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (batch.value().empty()) continue;
    if (auto meta = batch.value().back().metadata(); meta.ok()) {
      stream_pending_.store(meta.value().num_pending, std::memory_order_relaxed);
    }
    {
      std::unique_lock lock(ack_mutex_);
      fetched_sequence_ = std::max(fetched_sequence_, batch.value().back().stream_sequence());
      space_cv_.wait(lock, [&] { return stop_fetch_ || fetched_.size() < kFetchedBatchesQueued; });
      // NOTE: on stop a batch still in hand is dropped unacknowledged: it is redelivered (or
      // re-read from the snapshot's sequence after a restart), never lost.
      if (stop_fetch_) return;
      fetched_messages_ += batch.value().size();
      fetched_.push_back(std::move(batch).value());
    }
    dispatch_cv_.notify_one();
  }
}

// Stage 2: decode outside the dispatch lock, then sequencer + lanes for the whole batch under it,
// then queue the batch's last message for the cumulative ack. Drains the hand-off queue before
// exiting.
void Ingest::dispatch_loop() {
  std::vector<Message> msgs;
  std::vector<std::vector<RouterEvent>> prepared;
  std::vector<std::uint64_t> sequences;
  std::vector<char> usable;                                     // 0: redelivered duplicate or dead-lettered
  std::vector<std::pair<std::size_t, std::string>> over_limit;  // refused by the stream limit, with the reason
  while (true) {
    {
      std::unique_lock lock(ack_mutex_);
      dispatch_cv_.wait(lock, [&] { return stop_dispatch_ || !fetched_.empty(); });
      if (fetched_.empty()) return;  // stop_dispatch_ and drained
      msgs = std::move(fetched_.front());
      fetched_.pop_front();
      fetched_messages_ -= msgs.size();
    }
    space_cv_.notify_all();
    const std::size_t n = msgs.size();
    if (prepared.size() < n) prepared.resize(n);
    sequences.assign(n, 0);
    usable.assign(n, 0);
    // NOTE: dispatched_sequence_ is written only by this thread (under dispatch_mutex_), so it
    // can be read here without the lock.
    std::uint64_t handled_up_to = dispatched_sequence_;
    for (std::size_t i = 0; i < n; ++i) {
      sequences[i] = msgs[i].stream_sequence();
      if (sequences[i] != 0 && sequences[i] <= handled_up_to) continue;  // redelivery: skip whole
      if (sequences[i] != 0) handled_up_to = sequences[i];
      usable[i] = prepare_message(msgs[i].subject(), msgs[i].data(), prepared[i]) ? 1 : 0;
    }
    std::size_t events = 0;
    std::uint64_t last_sequence = 0;
    over_limit.clear();
    {
      std::lock_guard lock(dispatch_mutex_);
      for (std::size_t i = 0; i < n; ++i) {
        if (sequences[i] != 0 && sequences[i] <= dispatched_sequence_) continue;
        if (usable[i]) {
          // NOTE: the limit is checked here, in the same critical section as the sequencing,
          // so the check and the streams it admits cannot be separated by another message.
          if (std::string refused = refuse_over_stream_limit(prepared[i]); !refused.empty()) {
            over_limit.emplace_back(i, std::move(refused));
          } else {
            events += sequence_events(prepared[i]);
          }
        }
        if (sequences[i] != 0) dispatched_sequence_ = sequences[i];
      }
      hand_to_lanes();
      last_sequence = dispatched_sequence_;
    }
    // Dead letters outside the lock, while the batch's messages are still here (the last one
    // moves to the acker below).
    for (const auto& [i, reason] : over_limit) {
      reject_over_stream_limit(msgs[i].subject(), msgs[i].data(), prepared[i], reason);
    }
    for (std::size_t i = 0; i < n; ++i) prepared[i].clear();
    {
      std::lock_guard lock(ack_mutex_);
      ack_queue_.push_back(AckItem{std::move(msgs.back()), last_sequence, events + 1});
      inflight_events_ += events + 1;
    }
    msgs.clear();
    ack_cv_.notify_one();
  }
}

// Stage 3: acknowledge what the lanes have applied.
void Ingest::ack_loop() {
  while (true) {
    std::deque<AckItem> items;
    {
      std::unique_lock lock(ack_mutex_);
      ack_cv_.wait(lock, [&] { return stop_acker_ || !ack_queue_.empty(); });
      if (ack_queue_.empty()) return;  // stop_acker_ and drained
      items.swap(ack_queue_);
    }
    // NOTE: flush is a FIFO barrier over every lane: when it returns, every event dispatched
    // before these items were queued has been applied, so acknowledging is now safe.
    if (ctx_.indexer.flush() != IndexerStatus::ok) {
      ctx_.healthy = false;
      spdlog::error("indexer offline: not acknowledging; messages will be redelivered after a restart");
      std::lock_guard lock(ack_mutex_);
      for (auto& item : items) inflight_events_ -= item.events;
      space_cv_.notify_all();
      continue;
    }
    AckItem& newest = items.back();
    if (auto s = jetstream_ack(ctx_.ingest_conn, newest.last); !s.ok())
      spdlog::warn("ack failed: {}", s.error().message);
    std::size_t done = 0;
    for (auto& item : items) done += item.events;
    {
      std::lock_guard lock(ack_mutex_);
      inflight_events_ -= done;
      if (newest.sequence > acked_sequence_) acked_sequence_ = newest.sequence;
      note_catch_up();
    }
    space_cv_.notify_all();
    acked_cv_.notify_all();
  }
}

// Caller holds ack_mutex_. Latches caught_up_ once the acknowledged sequence reaches the stream's
// end as it was at start.
void Ingest::note_catch_up() {
  if (caught_up_.load(std::memory_order_relaxed) || acked_sequence_ < catch_up_target_) return;
  caught_up_.store(true);
  spdlog::info("caught up with the events stream (sequence {}, its end at start) in {:.1f} s", catch_up_target_,
               std::chrono::duration<double>(Clock::now() - started_at_).count());
}

}  // namespace kvidx::bus
