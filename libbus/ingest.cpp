#include "libbus/ingest.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <iterator>

#include "libcodec/event_codec.h"
#include "libcodec/untrusted_text.h"
#include "libindexer/thread_name.h"

namespace kvidx::bus {

Ingest::Ingest(ServiceContext& ctx)
    : ctx_(ctx),
      counters_(ctx.counters),
      events_head_(ctx.subjects.prefix() + ".events."),
      intake_(IntakeOptions{StreamSequencerOptions{0, ctx.config.clear_on_gap, ctx.config.max_streams}}),
      sequencer_(intake_.sequencer()) {
  ctx_.metrics.gauge_callback("kvidx_ingest_inflight_events", "Events handed to lanes and not yet acknowledged", {},
                              [this] {
                                std::lock_guard lock(ack_mutex_);
                                return static_cast<double>(inflight_events_);
                              });
  ctx_.metrics.gauge_callback("kvidx_acked_sequence", "Last JetStream sequence applied and acknowledged", {}, [this] {
    std::lock_guard lock(ack_mutex_);
    return static_cast<double>(acked_sequence_);
  });
  ctx_.metrics.gauge_callback(
      "kvidx_stream_lag_messages",
      "JetStream: messages of the events stream this replica has not yet applied and acknowledged (undelivered plus "
      "in flight)",
      {}, [this] {
        const std::uint64_t pending = stream_pending_.load(std::memory_order_relaxed);
        std::lock_guard lock(ack_mutex_);
        const std::uint64_t in_flight = fetched_sequence_ > acked_sequence_ ? fetched_sequence_ - acked_sequence_ : 0;
        return static_cast<double>(pending + in_flight);
      });
  ctx_.metrics.gauge_callback("kvidx_core_dropped_messages", "Core mode: messages dropped by the client", {}, [this] {
    std::int64_t dropped = 0;
    for (const auto& s : core_subs_) dropped += s.dropped();
    return static_cast<double>(dropped);
  });
}

// Decode and check one message; needs no lock (so it can run outside dispatch_mutex_). Returns
// false when the message was dead-lettered.
bool Ingest::prepare_message(std::string_view subject, std::string_view data, std::vector<RouterEvent>& events) {
  counters_.messages_total->inc();
  auto decoded = decode_router_events(data, ctx_.config.limits);
  if (!decoded.ok()) {
    counters_.events(0, EventResult::rejected).inc();
    dead_letter(subject, data, "decode", "decode: " + decoded.error().message());
    return false;
  }
  events = std::move(decoded).value();
  // The subject's worker id (kv.events.<id>) must match every event's; other subjects (Dynamo
  // layout) carry no id and the payload's is used.
  if (const auto& shard = ctx_.subjects.shard(); shard) {
    // NOTE: a shard reads only <p>.events.I.<worker_id> (its consumer's filter); the id must be the
    // payload's, and NATS's partition of it must be I: else the server's mapping partitions into
    // another count than --shard's N, and this shard would hold workers another one also holds.
    const auto subject_worker = ctx_.subjects.worker_from_shard_events_subject(subject);
    std::string problem;
    if (!subject_worker) {
      problem = fmt::format("subject: shard {} reads {}.<worker_id> only", to_string(*shard),
                            ctx_.subjects.events_filter().substr(0, ctx_.subjects.events_filter().size() - 2));
    } else if (const auto token = subject.substr(subject.rfind('.') + 1);
               partition_of_token(token, shard->count) != shard->index) {
      problem =
          fmt::format("subject: worker {} belongs to shard {} of {}, not {}: the server's events mapping must be `{}`",
                      untrusted_excerpt(token), partition_of_token(token, shard->count), shard->count, shard->index,
                      shard_mapping_config(ctx_.subjects.prefix(), shard->count));
    } else {
      for (const RouterEvent& e : events) {
        if (e.worker_id != *subject_worker) {
          problem =
              fmt::format("subject: worker id {} does not match payload worker_id {}", *subject_worker, e.worker_id);
          break;
        }
      }
    }
    if (!problem.empty()) {
      counters_.events(0, EventResult::rejected).inc(events.size());
      dead_letter(subject, data, "subject", problem);
      return false;
    }
  } else if (subject.substr(0, events_head_.size()) == events_head_) {
    // NOTE: <p>.events.<P>.<id> is what a server's shard mapping makes of <p>.events.<id>: an
    // unsharded kvidx reads a sharded deployment's stream too (a whole replica beside the shards).
    auto subject_worker = ctx_.subjects.worker_from_events_subject(subject);
    if (!subject_worker) subject_worker = ctx_.subjects.worker_from_partitioned_events_subject(subject);
    if (!subject_worker) {
      counters_.events(0, EventResult::rejected).inc(events.size());
      dead_letter(subject, data, "subject", "subject: no numeric worker id after " + events_head_);
      return false;
    }
    for (const RouterEvent& e : events) {
      if (e.worker_id != *subject_worker) {
        counters_.events(0, EventResult::rejected).inc(events.size());
        dead_letter(subject, data, "subject",
                    "subject: worker id " + std::to_string(*subject_worker) + " does not match payload worker_id " +
                        std::to_string(e.worker_id));
        return false;
      }
    }
  }
  return true;
}

// Caller holds dispatch_mutex_. The stream limit (ServiceConfig::max_streams) for one message's
// events: empty when they may be sequenced (their new streams are reserved now, so a message
// admitted here keeps its places until it is sequenced), else the rejection reason.
std::string Ingest::refuse_over_stream_limit(std::span<const RouterEvent> events) {
  const auto refused = sequencer_.refuse_new_streams(events);
  if (!refused) return {};
  std::string named;
  for (std::size_t i = 0; i < refused->size() && i < 3; ++i) {
    named += fmt::format("{}worker {} rank {}", i == 0 ? "" : ", ", (*refused)[i].worker_id, (*refused)[i].dp_rank);
  }
  if (refused->size() > 3) named += ", ...";
  return fmt::format(
      "stream limit reached: {} (worker, rank) streams; this message would add {} new ({}); remove "
      "workers ({}) or raise --max-streams",
      sequencer_.max_streams(), refused->size(), named, ctx_.subjects.admin_remove_worker());
}

// Counts an event message refused by the stream limit and dead-letters it. Outside the lock.
void Ingest::reject_over_stream_limit(std::string_view subject, std::string_view data,
                                      const std::vector<RouterEvent>& events, const std::string& reason) {
  counters_.stream_limit_rejections->inc();
  for (const RouterEvent& e : events)
    counters_.events(static_cast<std::size_t>(kind_of(e.event.data)), EventResult::rejected).inc();
  dead_letter(subject, data, "stream_limit", reason);
}

// Caller holds dispatch_mutex_ for this and the hand_to_lanes() that must follow. Runs the
// intake's ordering rules over `events` and moves those to apply into `to_lanes_` (with the clears
// restarts need); counts duplicates, gaps and resets. Returns how many events to apply.
std::size_t Ingest::sequence_events(std::vector<RouterEvent>& events) {
  const IntakeTally t = intake_.admit(events, to_lanes_);
  for (std::size_t kind = 0; kind < 3; ++kind) {
    if (t.duplicates_by_kind[kind] > 0) counters_.events(kind, EventResult::duplicate).inc(t.duplicates_by_kind[kind]);
    to_lanes_by_kind_[kind] += t.accepted_by_kind[kind];
  }
  if (t.gaps > 0) counters_.gaps_total->inc(t.gaps);
  if (t.missing_events > 0) counters_.missing_total->inc(t.missing_events);
  if (t.resets > 0) counters_.resets_total->inc(t.resets);
  return t.accepted();
}

// Caller holds dispatch_mutex_. Hands `to_lanes_` over: one lock and wake-up per lane, not per event.
void Ingest::hand_to_lanes() {
  if (to_lanes_.empty()) return;
  const bool queued = ctx_.indexer.enqueue_events(to_lanes_) == IndexerStatus::ok;
  if (!queued) ctx_.healthy = false;
  for (std::size_t kind = 0; kind < 3; ++kind) {
    if (to_lanes_by_kind_[kind] > 0) {
      counters_.events(kind, queued ? EventResult::applied : EventResult::rejected).inc(to_lanes_by_kind_[kind]);
    }
    to_lanes_by_kind_[kind] = 0;
  }
  to_lanes_.clear();
}

// Caller holds dispatch_mutex_. Sequencer, then lanes. Returns the number of events handed to lanes.
std::size_t Ingest::dispatch_events(std::vector<RouterEvent>& events) {
  const std::size_t accepted = sequence_events(events);
  hand_to_lanes();
  return accepted;
}

BusStatus Ingest::start_core() {
  std::vector<std::string> subjects_to_read{ctx_.subjects.events_filter()};
  subjects_to_read.insert(subjects_to_read.end(), ctx_.config.extra_subjects.begin(), ctx_.config.extra_subjects.end());
  for (const std::string& subject : subjects_to_read) {
    CoreIngest* state = core_ingest_.emplace_back(std::make_unique<CoreIngest>()).get();
    auto sub = ctx_.ingest_conn.subscribe(subject, [this, state](Message msg) { on_core_message(*state, msg); });
    if (!sub.ok()) return sub.error();
    // NOTE: core mode is best effort, but the client should never be the one dropping.
    if (auto s = sub.value().set_unlimited_pending(); !s.ok()) return s;
    state->sub.store(sub.value().raw(), std::memory_order_release);
    core_subs_.push_back(std::move(sub).value());
  }
  if (auto s = ctx_.ingest_conn.flush(); !s.ok()) return s;
  caught_up_ = true;  // nothing to catch up with: ready once subscribed
  return {};
}

void Ingest::on_core_message(CoreIngest& state, const Message& msg) {
  // nats.c's delivery thread runs this; named on its first message so `top -H` and perf show the
  // core ingest stage as they show the JetStream ones.
  thread_local bool named = false;
  if (!named) {
    name_this_thread("kvidx-core-in");
    named = true;
  }
  if (prepare_message(msg.subject(), msg.data(), state.decoded)) {
    std::string refused;
    if (ctx_.config.max_streams > 0) {
      // NOTE: checked per message (bursts merge messages): the places of its new streams are
      // reserved now, so the burst that carries them later is within the limit. (A removal of
      // the same worker in between frees a reserved place early; the limit can then be passed
      // by the streams of the bursts in flight, at most kCoreBurst events' worth.)
      std::lock_guard lock(dispatch_mutex_);
      refused = refuse_over_stream_limit(state.decoded);
    }
    if (!refused.empty()) {
      reject_over_stream_limit(msg.subject(), msg.data(), state.decoded, refused);
    } else if (state.burst.empty()) {
      state.burst.swap(state.decoded);
    } else {
      state.burst.insert(state.burst.end(), std::make_move_iterator(state.decoded.begin()),
                         std::make_move_iterator(state.decoded.end()));
    }
    state.decoded.clear();
  }
  // NOTE: nats.c takes a message off the pending list before calling the handler, so 0 means
  // nothing else is waiting right now.
  natsSubscription* sub = state.sub.load(std::memory_order_acquire);
  int pending_msgs = 0;
  int pending_bytes = 0;
  if (state.burst.size() >= kCoreBurst || sub == nullptr ||
      natsSubscription_GetPending(sub, &pending_msgs, &pending_bytes) != NATS_OK || pending_msgs == 0) {
    flush_core_burst(state);
  }
}

void Ingest::flush_core_burst(CoreIngest& state) {
  if (state.burst.empty()) return;
  {
    std::lock_guard lock(dispatch_mutex_);
    dispatch_events(state.burst);
  }
  state.burst.clear();
}

void Ingest::open_local() {
  std::lock_guard lock(dispatch_mutex_);
  local_open_ = true;
}

// In-process sources: the sequencer and lanes under the dispatch lock, as a NATS message's events.
BusStatus Ingest::ingest_local(std::span<const RouterEvent> events) {
  std::vector<RouterEvent> batch(events.begin(), events.end());  // copied outside the lock
  std::lock_guard lock(dispatch_mutex_);
  // NOTE: checked under the dispatch lock, which stop() takes to close it before draining the
  // lanes: a batch is either fully dispatched before the drain (and the final snapshot) or refused.
  if (!local_open_) return BusError{NATS_ILLEGAL_STATE, "service is not running"};
  counters_.local_batches_total->inc();
  if (std::string refused = refuse_over_stream_limit(batch); !refused.empty()) {
    counters_.stream_limit_rejections->inc();
    for (const RouterEvent& e : batch)
      counters_.events(static_cast<std::size_t>(kind_of(e.event.data)), EventResult::rejected).inc();
    if (const auto v = ctx_.warnings.admit("local_stream_limit"); v.log) {
      spdlog::warn("refused a batch of {} events from an in-process source: {}{}", batch.size(), refused,
                   suppressed_note(v));
    }
    return BusError{NATS_ERR, refused};
  }
  dispatch_events(batch);
  return {};
}

IndexerStatus Ingest::remove_worker(const RemoveWorkerRequest& r) {
  std::lock_guard lock(dispatch_mutex_);
  if (r.dp_rank) {
    const IndexerStatus status = ctx_.indexer.reset_worker_dp_rank_and_wait(r.worker_id, *r.dp_rank);
    sequencer_.forget({r.worker_id, *r.dp_rank});
    return status;
  }
  const IndexerStatus status = ctx_.indexer.remove_worker(r.worker_id);
  sequencer_.forget_worker(r.worker_id);
  ctx_.load.remove_worker(r.worker_id);
  return status;
}

BusStatus Ingest::restore(IndexSnapshot& snap) {
  std::lock_guard lock(dispatch_mutex_);
  for (RouterEvent& e : snap.events) ctx_.indexer.enqueue_event(std::move(e));
  if (ctx_.indexer.flush() != IndexerStatus::ok) return BusError{NATS_ERR, "indexer offline while restoring"};
  for (const auto& [stream, id] : snap.watermarks) sequencer_.restore(stream, id);
  dispatched_sequence_ = snap.stream_sequence;
  restored_sequence_ = snap.stream_sequence;
  {
    std::lock_guard ack_lock(ack_mutex_);
    acked_sequence_ = snap.stream_sequence;
  }
  return {};
}

bool Ingest::capture(IndexSnapshot& snap) {
  // NOTE: holding the dispatch mutex while dumping makes the dump, the watermarks and the
  // sequence one consistent cut: dump_events is a barrier over everything dispatched.
  std::lock_guard lock(dispatch_mutex_);
  auto events = ctx_.indexer.dump_events();
  if (!events) return false;
  snap.events = std::move(*events);
  snap.watermarks = sequencer_.watermarks();
  snap.stream_sequence = dispatched_sequence_;
  return true;
}

std::uint64_t Ingest::restored_sequence() {
  std::lock_guard lock(dispatch_mutex_);
  return restored_sequence_;
}

void Ingest::stop_receiving() {
  {
    std::lock_guard lock(dispatch_mutex_);
    local_open_ = false;
  }
  {
    std::lock_guard lock(ack_mutex_);
    stop_fetch_ = true;
  }
  space_cv_.notify_all();
  if (fetch_thread_.joinable()) fetch_thread_.join();
  {
    std::lock_guard lock(ack_mutex_);
    stop_dispatch_ = true;
  }
  dispatch_cv_.notify_all();
  if (dispatch_thread_.joinable()) dispatch_thread_.join();
  core_subs_.clear();  // waits for the delivery threads to return
  for (auto& state : core_ingest_) flush_core_burst(*state);
}

void Ingest::drain_acks() {
  {
    std::lock_guard lock(ack_mutex_);
    stop_acker_ = true;
  }
  ack_cv_.notify_all();
  if (ack_thread_.joinable()) ack_thread_.join();
}

void Ingest::close() { pull_.reset(); }

bool Ingest::wait_for_acked_sequence(std::uint64_t sequence, std::chrono::milliseconds timeout) {
  std::unique_lock lock(ack_mutex_);
  return acked_cv_.wait_for(lock, timeout, [&] { return acked_sequence_ >= sequence; });
}

std::string Ingest::catching_up_reason() {
  std::lock_guard lock(ack_mutex_);
  return "catching up: applied and acknowledged the events stream up to sequence " + std::to_string(acked_sequence_) +
         " of " + std::to_string(catch_up_target_) + " (its end at start)";
}

void Ingest::fill_stats(ServiceStats& s) {
  {
    std::lock_guard lock(ack_mutex_);
    s.acked_sequence = acked_sequence_;
  }
  {
    std::lock_guard lock(dispatch_mutex_);
    s.dispatched_sequence = dispatched_sequence_;
    s.restored_sequence = restored_sequence_;
    s.history_trimmed = history_trimmed_;
  }
  for (const auto& sub : core_subs_) s.core_dropped += sub.dropped();
}

}  // namespace kvidx::bus
