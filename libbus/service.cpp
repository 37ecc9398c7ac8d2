#include "libbus/service.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "libbus/chunked_reply.h"
#include "libcodec/dump_codec.h"
#include "libcodec/query_codec.h"
#include "libcodec/router_messages_codec.h"
#include "libcodec/untrusted_text.h"
#include "libbus/event_chunks.h"
#include "libbus/log_rate_limiter.h"
#include "libbus/metrics.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/nats_url.h"
#include "libbus/ordered_stream_reader.h"
#include "libbus/snapshot_store.h"
#include "libbus/subjects.h"
#include "libindexer/hashing.h"
#include "libindexer/load/active_load.h"
#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/intake/stream_sequencer.h"

namespace kvidx::bus {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

}  // namespace

struct KvidxService::Impl {
  explicit Impl(ServiceConfig c)
      : config(std::move(c)),
        subjects(config.subject_prefix),
        indexer(LaneIndexerOptions{config.lanes == 0 ? 1 : config.lanes, config.approximate}),
        sequencer(StreamSequencerOptions{0, config.clear_on_gap, config.max_streams}) {
    register_metrics();
  }

  // ---- configuration and parts -------------------------------------------------------------
  ServiceConfig config;
  Subjects subjects;
  std::string events_head = subjects.prefix() + ".events.";  // "<prefix>.events."
  LaneIndexer indexer;
  ActiveLoad load;
  MetricsRegistry metrics;

  Connection ingest_conn;    // fetch/core subscription, acks, dead letters
  Connection query_conn;     // responders (send_asap)
  std::optional<JetStream> js;
  std::optional<OrderedStreamReader> pull;
  std::vector<Subscription> core_subs;
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
  std::vector<std::unique_ptr<CoreIngest>> core_ingest;
  std::vector<Subscription> query_subs;
  std::optional<SnapshotStore> snapshots;

  // ---- dispatch state (guarded by dispatch_mutex) ---------------------------------------------
  // NOTE: one mutex serialises everything that hands events to lanes (fetch thread, core
  // callbacks, admin removals, snapshot capture), so the sequencer and the dispatched sequence are
  // always consistent with what the lanes have been given.
  std::mutex dispatch_mutex;
  StreamSequencer sequencer;
  std::uint64_t dispatched_sequence = 0;
  std::uint64_t restored_sequence = 0;
  std::uint64_t history_trimmed = 0;  // set once at start
  std::vector<RouterEvent> to_lanes;  // sequenced, not yet handed to the lanes
  std::size_t to_lanes_by_kind[3] = {0, 0, 0};

  // ---- ack pipeline ---------------------------------------------------------------------------
  struct AckItem {
    Message last;  // the batch's last message; AckAll on it acknowledges the whole batch
    std::uint64_t sequence = 0;
    std::size_t events = 0;
  };
  std::mutex ack_mutex;
  std::condition_variable ack_cv;       // acker wakes on new items / stop
  std::condition_variable space_cv;     // fetcher wakes when in-flight drops
  std::condition_variable acked_cv;     // waiters of wait_for_acked_sequence
  std::deque<AckItem> ack_queue;
  std::size_t inflight_events = 0;
  std::uint64_t acked_sequence = 0;
  bool stop_fetch = false;
  bool stop_dispatch = false;
  bool stop_acker = false;
  // Fetched batches waiting for the dispatch thread (guarded by ack_mutex).
  static constexpr std::size_t kFetchedBatchesQueued = 2;
  std::deque<std::vector<Message>> fetched;
  std::size_t fetched_messages = 0;
  std::condition_variable dispatch_cv;

  std::thread fetch_thread;
  std::thread dispatch_thread;
  std::thread ack_thread;
  std::thread snapshot_thread;
  std::mutex snapshot_timer_mutex;
  std::condition_variable snapshot_timer_cv;
  std::mutex snapshot_write_mutex;  // one snapshot at a time
  std::atomic<bool> started{false};  // start() completed once (read by readiness())
  bool stopped = false;
  bool local_open = false;  // guarded by dispatch_mutex: ingest_local_events is accepted
  // Liveness: true from construction; false once the indexer went offline or stop() ran (and,
  // see alive(), while a NATS connection is closed for good).
  std::atomic<bool> healthy{true};
  std::atomic<bool> connections_made{false};  // release: ingest_conn / query_conn are set

  // ---- readiness ------------------------------------------------------------------------------
  std::atomic<bool> serving{false};    // start() completed and stop() not begun
  std::atomic<bool> caught_up{false};  // latched: acked_sequence reached catch_up_target
  std::uint64_t catch_up_target = 0;   // guarded by ack_mutex: the events stream's end at start
  Clock::time_point started_at = Clock::now();

  // ---- snapshot health ------------------------------------------------------------------------
  // NOTE: written by whichever thread wrote a snapshot (timer, snapshot_now, stop) under
  // snapshot_write_mutex; read by scrapes and stats through the atomics only.
  std::atomic<Clock::rep> last_good_snapshot{Clock::now().time_since_epoch().count()};
  bool snapshot_failing = false;       // guarded by snapshot_write_mutex
  std::uint64_t failures_in_row = 0;   // guarded by snapshot_write_mutex
  Clock::time_point failing_since;     // guarded by snapshot_write_mutex
  std::string last_snapshot_error;     // guarded by snapshot_write_mutex
  bool stale_logged = false;           // guarded by snapshot_timer_mutex (snapshot_loop only)

  // ---- metrics --------------------------------------------------------------------------------
  Counter* messages_total = nullptr;
  Counter* events_by[3][3] = {};  // [kind][result: applied, duplicate, rejected]
  Counter* gaps_total = nullptr;
  Counter* missing_total = nullptr;
  Counter* resets_total = nullptr;
  Counter* dead_letters_total = nullptr;            // published
  Counter* dead_letters_truncated = nullptr;        // of those, body cut to fit max_payload
  enum DeadLetterFailure : std::size_t { too_large, publish_error };
  Counter* dead_letter_failures[2] = {};            // by DeadLetterFailure: not published
  Counter* stream_limit_rejections = nullptr;       // event messages refused by max_streams
  Counter* queries_rejected[kCodecErrorKinds] = {};  // by CodecErrorKind
  Counter* snapshots_total = nullptr;
  Counter* consumer_resets_total = nullptr;
  Counter* fetch_errors_total = nullptr;
  Counter* stream_holes_total = nullptr;
  Counter* snapshot_failures_total = nullptr;
  Counter* reply_too_large_total = nullptr;
  Counter* reply_failures_total = nullptr;
  Counter* lifecycle_total = nullptr;
  Counter* lifecycle_rejected = nullptr;
  Counter* local_batches_total = nullptr;
  Histogram* query_latency = nullptr;
  Histogram* admin_latency = nullptr;
  // Warnings about rejected input, per kind: counters above stay exact, the log does not grow with
  // the input rate (first occurrence, then one line per 10 s per kind with the count left out).
  LogRateLimiter warnings;

  void register_metrics() {
    const char* kinds[] = {"stored", "removed", "cleared"};
    const char* results[] = {"applied", "duplicate", "rejected"};
    for (int k = 0; k < 3; ++k) {
      for (int r = 0; r < 3; ++r) {
        events_by[k][r] = &metrics.counter("kvidx_events_total", "Router events by type and result",
                                           {{"type", kinds[k]}, {"result", results[r]}});
      }
    }
    messages_total = &metrics.counter("kvidx_event_messages_total", "Event messages received from NATS");
    gaps_total = &metrics.counter("kvidx_event_gaps_total", "event_id gaps seen (per occurrence)");
    missing_total = &metrics.counter("kvidx_events_missing_total", "Events skipped over by gaps");
    resets_total = &metrics.counter("kvidx_stream_resets_total", "Publisher restarts (event_id back to 0)");
    dead_letters_total = &metrics.counter("kvidx_dead_letters_total", "Messages published on the dead-letter subject");
    dead_letters_truncated = &metrics.counter("kvidx_dead_letters_truncated_total",
                                              "Dead letters published with the body cut to fit the server's max_payload");
    const char* failure_reasons[] = {"too_large", "publish_error"};  // DeadLetterFailure order
    for (int r = 0; r < 2; ++r) {
      dead_letter_failures[r] = &metrics.counter("kvidx_dead_letter_failures_total",
                                                 "Rejected messages whose dead letter could not be published",
                                                 {{"reason", failure_reasons[r]}});
    }
    stream_limit_rejections = &metrics.counter(
        "kvidx_stream_limit_rejections_total", "Event messages dead-lettered because they would exceed --max-streams");
    for (std::size_t k = 0; k < kCodecErrorKinds; ++k) {
      queries_rejected[k] = &metrics.counter("kvidx_queries_rejected_total", "Score queries answered with bad_request",
                                             {{"reason", std::string(to_string(static_cast<CodecErrorKind>(k)))}});
    }
    snapshots_total = &metrics.counter("kvidx_snapshots_total", "Snapshots written");
    consumer_resets_total = &metrics.counter(
        "kvidx_consumer_resets_total", "Events consumer re-created to re-read from the next expected stream sequence");
    fetch_errors_total = &metrics.counter("kvidx_fetch_errors_total",
                                          "Failed fetches from the events consumer (disconnected, consumer gone)");
    stream_holes_total =
        &metrics.counter("kvidx_stream_holes_total", "Events stream sequences that no longer existed when read");
    snapshot_failures_total = &metrics.counter("kvidx_snapshot_failures_total", "Snapshot writes that failed");
    reply_failures_total = &metrics.counter("kvidx_reply_failures_total", "Replies that could not be published");
    reply_too_large_total = &metrics.counter(
        "kvidx_replies_too_large_total",
        "Replies over the server's max_payload answered with a reply_too_large error (requester did not accept chunks)");
    metrics.gauge_callback("kvidx_ready", "1 when the service is ready for traffic (/readyz)", {},
                           [this] { return readiness().ready ? 1.0 : 0.0; });
    local_batches_total =
        &metrics.counter("kvidx_local_event_batches_total", "Event batches from in-process sources (ZMQ bridges)");
    lifecycle_total = &metrics.counter("kvidx_request_lifecycle_total", "Request lifecycle messages applied");
    lifecycle_rejected =
        &metrics.counter("kvidx_request_lifecycle_rejected_total", "Request lifecycle messages rejected");
    query_latency = &metrics.histogram("kvidx_query_duration_seconds", "Query handling latency",
                                       latency_buckets_seconds(), {{"subject", "scores"}});
    admin_latency = &metrics.histogram("kvidx_query_duration_seconds", "Query handling latency",
                                       latency_buckets_seconds(), {{"subject", "admin"}});
    metrics.gauge_callback("kvidx_ingest_inflight_events", "Events handed to lanes and not yet acknowledged", {},
                           [this] {
                             std::lock_guard lock(ack_mutex);
                             return static_cast<double>(inflight_events);
                           });
    metrics.gauge_callback("kvidx_lanes", "Lane threads", {}, [this] { return static_cast<double>(indexer.lane_count()); });
    for (std::size_t lane = 0; lane < indexer.lane_count(); ++lane) {
      metrics.gauge_callback("kvidx_lane_queue_depth", "Tasks waiting in a lane's queue",
                             {{"lane", std::to_string(lane)}}, [this, lane] {
                               const auto depths = indexer.metrics().lane_queue_depths;
                               return lane < depths.size() ? static_cast<double>(depths[lane]) : 0.0;
                             });
    }
    metrics.gauge_callback("kvidx_tree_blocks", "Blocks held, summed over streams", {},
                           [this] { return static_cast<double>(indexer.shard_sizes().block_count); });
    metrics.gauge_callback("kvidx_tree_nodes", "Attached radix tree nodes", {},
                           [this] { return static_cast<double>(indexer.tree().node_count()); });
    metrics.gauge_callback("kvidx_tree_blocks_pending_cleanup",
                           "Blocks no stream holds, attached until the next cleanup (upper bound)", {},
                           [this] { return static_cast<double>(indexer.tree().dead_block_estimate()); });
    metrics.gauge_callback("kvidx_tree_workers", "Streams (worker, rank) holding blocks", {},
                           [this] { return static_cast<double>(indexer.shard_sizes().worker_count); });
    metrics.gauge_callback("kvidx_acked_sequence", "Last JetStream sequence applied and acknowledged", {}, [this] {
      std::lock_guard lock(ack_mutex);
      return static_cast<double>(acked_sequence);
    });
    metrics.gauge_callback("kvidx_core_dropped_messages", "Core mode: messages dropped by the client", {}, [this] {
      std::int64_t dropped = 0;
      for (const auto& s : core_subs) dropped += s.dropped();
      return static_cast<double>(dropped);
    });
    // What the tree did with the events the lanes applied (unknown parents, removals of unknown
    // blocks and malformed events are counted here, not dead-lettered: they are valid JSON).
    const char* statuses[] = {"ok", "parent_not_found", "block_not_found", "invalid"};
    for (std::size_t k = 0; k < LaneIndexerMetrics::kKinds; ++k) {
      for (std::size_t st = 0; st < LaneIndexerMetrics::kStatuses; ++st) {
        metrics.gauge_callback("kvidx_tree_apply_total", "Events applied by the tree, by type and outcome",
                               {{"type", kinds[k]}, {"status", statuses[st]}},
                               [this, k, st] { return static_cast<double>(indexer.metrics().applied[k][st]); });
      }
    }
    metrics.gauge_callback("kvidx_up", "1 while the service is alive (/healthz)", {}, [this] { return alive() ? 1.0 : 0.0; });
  }

  // ---- ingest ---------------------------------------------------------------------------------

  // A rejected message goes to <prefix>.deadletter as received, with its reason (Kvidx-Reason: a
  // bounded, printable text) and original subject (Kvidx-Subject). `kind` ("decode", "subject",
  // "stream_limit") groups the rate-limited log lines. kvidx_dead_letters_total counts what was
  // published: a message that cannot be republished whole under the server's max_payload (it
  // arrived near the limit, and the headers come on top) is published with its body cut to fit
  // and Kvidx-Truncated: <original bytes>, counted as published and as truncated. Only a dead
  // letter that cannot be published at all (the headers alone exceed max_payload, or the publish
  // fails) counts in kvidx_dead_letter_failures_total{reason} instead.
  void dead_letter(std::string_view subject, std::string_view data, std::string_view kind, const std::string& reason) {
    const std::string bounded = untrusted_excerpt(reason, kReasonBytes);
    if (const auto v = warnings.admit(fmt::format("dead_letter:{}", kind)); v.log) {
      spdlog::warn("dead-lettered a message of {} bytes on {}: {}{}", data.size(), untrusted_excerpt(subject), bounded,
                   suppressed_note(v));
    }
    const std::string original_subject(subject);
    const std::string original_bytes = std::to_string(data.size());
    // NOTE: nats.c encodes headers as "NATS/1.0\r\n", "Key: value\r\n" each, then "\r\n", and the
    // server bounds headers + body by max_payload. The Kvidx-Truncated line is counted whether or
    // not it is sent, so a body cut to `room` always fits.
    const auto header_line = [](const char* key, const std::string& value) { return std::strlen(key) + 2 + value.size() + 2; };
    const std::size_t header_bytes = 10 + header_line(kDeadLetterReasonHeader, bounded) +
                                     header_line(kDeadLetterSubjectHeader, original_subject) +
                                     header_line(kDeadLetterTruncatedHeader, original_bytes) + 2;
    const auto max_payload = static_cast<std::size_t>(std::max<std::int64_t>(ingest_conn.max_payload(), 0));
    if (header_bytes >= max_payload) {
      dead_letter_failed(too_large, subject, fmt::format("its headers alone ({} bytes) exceed max_payload {}", header_bytes, max_payload));
      return;
    }
    const std::size_t room = max_payload - header_bytes;
    const bool truncated = data.size() > room;
    auto msg = Message::create(subjects.deadletter(), truncated ? data.substr(0, room) : data);
    if (!msg.ok()) {
      dead_letter_failed(publish_error, subject, msg.error().message);
      return;
    }
    msg.value().set_header(kDeadLetterReasonHeader, bounded.c_str());
    msg.value().set_header(kDeadLetterSubjectHeader, original_subject.c_str());
    if (truncated) msg.value().set_header(kDeadLetterTruncatedHeader, original_bytes.c_str());
    if (auto s = ingest_conn.publish(msg.value()); !s.ok()) {
      dead_letter_failed(s.error().status == NATS_MAX_PAYLOAD ? too_large : publish_error, subject, s.error().message);
      return;
    }
    dead_letters_total->inc();
    if (truncated) dead_letters_truncated->inc();
  }

  void dead_letter_failed(DeadLetterFailure reason, std::string_view subject, const std::string& why) {
    dead_letter_failures[reason]->inc();
    if (const auto v = warnings.admit("dead_letter_failure"); v.log) {
      spdlog::warn("could not publish the dead letter of a message on {}: {}{}", untrusted_excerpt(subject),
                   untrusted_excerpt(why, kReasonBytes), suppressed_note(v));
    }
  }

  // Decode and check one message; needs no lock (so it can run outside dispatch_mutex). Returns
  // false when the message was dead-lettered.
  bool prepare_message(std::string_view subject, std::string_view data, std::vector<RouterEvent>& events) {
    messages_total->inc();
    auto decoded = decode_router_events(data, config.limits);
    if (!decoded.ok()) {
      events_by[0][2]->inc();
      dead_letter(subject, data, "decode", "decode: " + decoded.error().message());
      return false;
    }
    events = std::move(decoded).value();
    // The subject's worker id (kv.events.<id>) must match every event's; other subjects (Dynamo
    // layout) carry no id and the payload's is used.
    if (subject.substr(0, events_head.size()) == events_head) {
      const auto subject_worker = subjects.worker_from_events_subject(subject);
      if (!subject_worker) {
        events_by[0][2]->inc(events.size());
        dead_letter(subject, data, "subject", "subject: no numeric worker id after " + events_head);
        return false;
      }
      for (const RouterEvent& e : events) {
        if (e.worker_id != *subject_worker) {
          events_by[0][2]->inc(events.size());
          dead_letter(subject, data, "subject",
                      "subject: worker id " + std::to_string(*subject_worker) + " does not match payload worker_id " +
                          std::to_string(e.worker_id));
          return false;
        }
      }
    }
    return true;
  }

  // Caller holds dispatch_mutex. The stream limit (ServiceConfig::max_streams) for one message's
  // events: empty when they may be sequenced (their new streams are reserved now, so a message
  // admitted here keeps its places until it is sequenced), else the rejection reason.
  std::string refuse_over_stream_limit(std::span<const RouterEvent> events) {
    const auto refused = sequencer.refuse_new_streams(events);
    if (!refused) return {};
    std::string named;
    for (std::size_t i = 0; i < refused->size() && i < 3; ++i) {
      named += fmt::format("{}worker {} rank {}", i == 0 ? "" : ", ", (*refused)[i].worker_id, (*refused)[i].dp_rank);
    }
    if (refused->size() > 3) named += ", ...";
    return fmt::format("stream limit reached: {} (worker, rank) streams; this message would add {} new ({}); remove "
                       "workers ({}) or raise --max-streams",
                       sequencer.max_streams(), refused->size(), named, subjects.admin_remove_worker());
  }

  // Counts an event message refused by the stream limit and dead-letters it. Outside the lock.
  void reject_over_stream_limit(std::string_view subject, std::string_view data, const std::vector<RouterEvent>& events,
                                const std::string& reason) {
    stream_limit_rejections->inc();
    for (const RouterEvent& e : events) events_by[static_cast<std::size_t>(kind_of(e.event.data))][2]->inc();
    dead_letter(subject, data, "stream_limit", reason);
  }

  // Caller holds dispatch_mutex for this and the hand_to_lanes() that must follow. Runs the
  // sequencer over `events` and moves those to apply into `to_lanes`. Returns how many.
  std::size_t sequence_events(std::vector<RouterEvent>& events) {
    std::size_t accepted = 0;
    for (RouterEvent& e : events) {
      const auto kind = static_cast<std::size_t>(kind_of(e.event.data));
      const SequenceDecision d = sequencer.observe(e.stream(), e.event.event_id);
      if (!d.should_apply()) {
        events_by[kind][1]->inc();
        continue;
      }
      if (d.verdict == SequenceVerdict::gap) {
        gaps_total->inc();
        missing_total->inc(d.missing);
        if (d.first_gap_in_stream) {
          spdlog::warn("event gap on worker {} rank {}: {} event(s) missing before event_id {} (logged once per stream)",
                       e.worker_id, e.event.dp_rank, d.missing, e.event.event_id);
        }
      } else if (d.verdict == SequenceVerdict::reset) {
        resets_total->inc();
        spdlog::info("worker {} rank {} restarted (event_id {}): clearing its blocks", e.worker_id, e.event.dp_rank,
                     e.event.event_id);
      }
      if (d.clear_stream_first) {
        RouterEvent clear;
        clear.worker_id = e.worker_id;
        clear.event.event_id = e.event.event_id;
        clear.event.dp_rank = e.event.dp_rank;
        clear.event.data = KvCacheClearData{};
        to_lanes.push_back(std::move(clear));
      }
      to_lanes.push_back(std::move(e));
      ++to_lanes_by_kind[kind];
      ++accepted;
    }
    return accepted;
  }

  // Caller holds dispatch_mutex. Hands `to_lanes` over: one lock and wake-up per lane, not per event.
  void hand_to_lanes() {
    if (to_lanes.empty()) return;
    const bool queued = indexer.enqueue_events(to_lanes) == IndexerStatus::ok;
    if (!queued) healthy = false;
    for (std::size_t kind = 0; kind < 3; ++kind) {
      if (to_lanes_by_kind[kind] > 0) events_by[kind][queued ? 0 : 2]->inc(to_lanes_by_kind[kind]);
      to_lanes_by_kind[kind] = 0;
    }
    to_lanes.clear();
  }

  // Caller holds dispatch_mutex. Sequencer, then lanes. Returns the number of events handed to lanes.
  std::size_t dispatch_events(std::vector<RouterEvent>& events) {
    const std::size_t accepted = sequence_events(events);
    hand_to_lanes();
    return accepted;
  }

  void on_core_message(CoreIngest& state, const Message& msg) {
    if (prepare_message(msg.subject(), msg.data(), state.decoded)) {
      std::string refused;
      if (config.max_streams > 0) {
        // NOTE: checked per message (bursts merge messages): the places of its new streams are
        // reserved now, so the burst that carries them later is within the limit. (A removal of
        // the same worker in between frees a reserved place early; the limit can then be passed
        // by the streams of the bursts in flight, at most kCoreBurst events' worth.)
        std::lock_guard lock(dispatch_mutex);
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

  void flush_core_burst(CoreIngest& state) {
    if (state.burst.empty()) return;
    {
      std::lock_guard lock(dispatch_mutex);
      dispatch_events(state.burst);
    }
    state.burst.clear();
  }

  // In-process sources: the sequencer and lanes under the dispatch lock, as a NATS message's events.
  BusStatus ingest_local(std::span<const RouterEvent> events) {
    std::vector<RouterEvent> batch(events.begin(), events.end());  // copied outside the lock
    std::lock_guard lock(dispatch_mutex);
    // NOTE: checked under the dispatch lock, which stop() takes to close it before draining the
    // lanes: a batch is either fully dispatched before the drain (and the final snapshot) or refused.
    if (!local_open) return BusError{NATS_ILLEGAL_STATE, "service is not running"};
    local_batches_total->inc();
    if (std::string refused = refuse_over_stream_limit(batch); !refused.empty()) {
      stream_limit_rejections->inc();
      for (const RouterEvent& e : batch) events_by[static_cast<std::size_t>(kind_of(e.event.data))][2]->inc();
      if (const auto v = warnings.admit("local_stream_limit"); v.log) {
        spdlog::warn("refused a batch of {} events from an in-process source: {}{}", batch.size(), refused, suppressed_note(v));
      }
      return BusError{NATS_ERR, refused};
    }
    dispatch_events(batch);
    return {};
  }

  // JetStream stage 1: only pulls, so the server keeps streaming while stage 2 decodes and
  // dispatches the previous batch. Hands batches over through a short bounded queue.
  void fetch_loop() {
    auto last_error_log = Clock::now() - std::chrono::seconds(10);
    while (true) {
      {
        std::unique_lock lock(ack_mutex);
        space_cv.wait(lock, [&] {
          return stop_fetch || inflight_events + fetched_messages < config.max_inflight_events;
        });
        if (stop_fetch) return;
      }
      auto batch = pull->fetch(config.fetch_batch, 250);
      // NOTE: the reader's counters are read only here, by the thread that drives it.
      consumer_resets_total->inc(pull->resets() - consumer_resets_total->value());
      stream_holes_total->inc(pull->holes() - stream_holes_total->value());
      if (!batch.ok()) {
        fetch_errors_total->inc();
        if (Clock::now() - last_error_log > std::chrono::seconds(5)) {
          spdlog::warn("fetch failed: {}", batch.error().message);
          last_error_log = Clock::now();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (batch.value().empty()) continue;
      {
        std::unique_lock lock(ack_mutex);
        space_cv.wait(lock, [&] { return stop_fetch || fetched.size() < kFetchedBatchesQueued; });
        // NOTE: on stop a batch still in hand is dropped unacknowledged: it is redelivered (or
        // re-read from the snapshot's sequence after a restart), never lost.
        if (stop_fetch) return;
        fetched_messages += batch.value().size();
        fetched.push_back(std::move(batch).value());
      }
      dispatch_cv.notify_one();
    }
  }

  // JetStream stage 2: decode outside the dispatch lock, then sequencer + lanes for the whole
  // batch under it, then queue the batch's last message for the cumulative ack. Drains the hand-off
  // queue before exiting.
  void dispatch_loop() {
    std::vector<Message> msgs;
    std::vector<std::vector<RouterEvent>> prepared;
    std::vector<std::uint64_t> sequences;
    std::vector<char> usable;  // 0: redelivered duplicate or dead-lettered
    std::vector<std::pair<std::size_t, std::string>> over_limit;  // refused by the stream limit, with the reason
    while (true) {
      {
        std::unique_lock lock(ack_mutex);
        dispatch_cv.wait(lock, [&] { return stop_dispatch || !fetched.empty(); });
        if (fetched.empty()) return;  // stop_dispatch and drained
        msgs = std::move(fetched.front());
        fetched.pop_front();
        fetched_messages -= msgs.size();
      }
      space_cv.notify_all();
      const std::size_t n = msgs.size();
      if (prepared.size() < n) prepared.resize(n);
      sequences.assign(n, 0);
      usable.assign(n, 0);
      // NOTE: dispatched_sequence is written only by this thread (under dispatch_mutex), so it
      // can be read here without the lock.
      std::uint64_t handled_up_to = dispatched_sequence;
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
        std::lock_guard lock(dispatch_mutex);
        for (std::size_t i = 0; i < n; ++i) {
          if (sequences[i] != 0 && sequences[i] <= dispatched_sequence) continue;
          if (usable[i]) {
            // NOTE: the limit is checked here, in the same critical section as the sequencing,
            // so the check and the streams it admits cannot be separated by another message.
            if (std::string refused = refuse_over_stream_limit(prepared[i]); !refused.empty()) {
              over_limit.emplace_back(i, std::move(refused));
            } else {
              events += sequence_events(prepared[i]);
            }
          }
          if (sequences[i] != 0) dispatched_sequence = sequences[i];
        }
        hand_to_lanes();
        last_sequence = dispatched_sequence;
      }
      // Dead letters outside the lock, while the batch's messages are still here (the last one
      // moves to the acker below).
      for (const auto& [i, reason] : over_limit) reject_over_stream_limit(msgs[i].subject(), msgs[i].data(), prepared[i], reason);
      for (std::size_t i = 0; i < n; ++i) prepared[i].clear();
      {
        std::lock_guard lock(ack_mutex);
        ack_queue.push_back(AckItem{std::move(msgs.back()), last_sequence, events + 1});
        inflight_events += events + 1;
      }
      msgs.clear();
      ack_cv.notify_one();
    }
  }

  void ack_loop() {
    while (true) {
      std::deque<AckItem> items;
      {
        std::unique_lock lock(ack_mutex);
        ack_cv.wait(lock, [&] { return stop_acker || !ack_queue.empty(); });
        if (ack_queue.empty()) return;  // stop_acker and drained
        items.swap(ack_queue);
      }
      // NOTE: flush is a FIFO barrier over every lane: when it returns, every event dispatched
      // before these items were queued has been applied, so acknowledging is now safe.
      if (indexer.flush() != IndexerStatus::ok) {
        healthy = false;
        spdlog::error("indexer offline: not acknowledging; messages will be redelivered after a restart");
        std::lock_guard lock(ack_mutex);
        for (auto& item : items) inflight_events -= item.events;
        space_cv.notify_all();
        continue;
      }
      AckItem& newest = items.back();
      if (auto s = jetstream_ack(ingest_conn, newest.last); !s.ok()) spdlog::warn("ack failed: {}", s.error().message);
      std::size_t done = 0;
      for (auto& item : items) done += item.events;
      {
        std::lock_guard lock(ack_mutex);
        inflight_events -= done;
        if (newest.sequence > acked_sequence) acked_sequence = newest.sequence;
        note_catch_up();
      }
      space_cv.notify_all();
      acked_cv.notify_all();
    }
  }

  // ---- snapshots --------------------------------------------------------------------------------

  BusStatus write_snapshot() {
    if (!snapshots) return BusError{NATS_ERR, "snapshots need JetStream mode"};
    std::lock_guard write_lock(snapshot_write_mutex);
    auto written = write_snapshot_locked();
    note_snapshot_outcome(written);
    if (!written.ok()) return written.error();
    return {};
  }

  // Caller holds snapshot_write_mutex.
  BusResult<SnapshotWritten> write_snapshot_locked() {
    IndexSnapshot snap;
    {
      // NOTE: holding the dispatch mutex while dumping makes the dump, the watermarks and the
      // sequence one consistent cut: dump_events is a barrier over everything dispatched.
      std::lock_guard lock(dispatch_mutex);
      auto events = indexer.dump_events();
      if (!events) return BusError{NATS_ERR, "indexer offline: no snapshot"};
      snap.events = std::move(*events);
      snap.watermarks = sequencer.watermarks();
      snap.stream_sequence = dispatched_sequence;
    }
    auto written = snapshots->write(snap);
    if (!written.ok()) return written.error();
    spdlog::info("snapshot written: {} events in {} chunk(s){}, stream sequence {}", snap.events.size(),
                 written.value().chunks,
                 written.value().split_events == 0
                     ? std::string()
                     : " (" + std::to_string(written.value().split_events) + " long edge(s) split over " +
                           std::to_string(written.value().lines - snap.events.size() + written.value().split_events) +
                           " events)",
                 snap.stream_sequence);
    return written;
  }

  // Caller holds snapshot_write_mutex. Every failure is counted; the log says only when the state
  // changes: the first failure (with its reason) and the recovery, not every interval.
  void note_snapshot_outcome(const BusResult<SnapshotWritten>& written) {
    const auto now = Clock::now();
    if (written.ok()) {
      snapshots_total->inc();
      last_good_snapshot.store(now.time_since_epoch().count(), std::memory_order_relaxed);
      if (snapshot_failing) {
        spdlog::info("snapshots recovered after {} failed attempt(s) over {:.0f} s", failures_in_row,
                     std::chrono::duration<double>(now - failing_since).count());
      }
      snapshot_failing = false;
      failures_in_row = 0;
      return;
    }
    snapshot_failures_total->inc();
    ++failures_in_row;
    last_snapshot_error = written.error().message;
    if (!snapshot_failing) {
      snapshot_failing = true;
      failing_since = now;
      spdlog::error("snapshot failed: {} (retried every interval; failures are counted in "
                    "kvidx_snapshot_failures_total, the recovery is logged)",
                    last_snapshot_error);
    }
  }

  double snapshot_age_seconds() const {
    const Clock::time_point last{Clock::duration(last_good_snapshot.load(std::memory_order_relaxed))};
    return std::chrono::duration<double>(Clock::now() - last).count();
  }

  std::chrono::milliseconds snapshot_stale_bound() const {
    if (config.snapshot_stale_after.count() > 0) return config.snapshot_stale_after;
    return std::max<std::chrono::milliseconds>(3 * config.snapshot_interval, std::chrono::seconds(60));
  }

  bool snapshot_stale() const {
    if (!snapshots || config.snapshot_interval.count() == 0) return false;
    return snapshot_age_seconds() > std::chrono::duration<double>(snapshot_stale_bound()).count();
  }

  void snapshot_loop() {
    std::unique_lock lock(snapshot_timer_mutex);
    while (!snapshot_timer_cv.wait_for(lock, config.snapshot_interval, [&] { return stopped; })) {
      lock.unlock();
      // NOTE: the outcome is counted and logged (on state changes) by write_snapshot itself.
      (void)write_snapshot();
      lock.lock();
      const bool stale = snapshot_stale();
      if (stale != stale_logged) {
        stale_logged = stale;
        if (stale) {
          spdlog::error("snapshot stale: the newest good snapshot is {:.1f} s old (bound {:.1f} s): not ready until "
                        "one is written",
                        snapshot_age_seconds(), snapshot_stale_bound().count() / 1000.0);
        } else {
          spdlog::info("snapshot no longer stale: ready again (if otherwise ready)");
        }
      }
    }
  }

  BusStatus restore() {
    auto loaded = snapshots->load_latest();
    if (!loaded.ok()) return loaded.error();
    if (!loaded.value()) return {};
    IndexSnapshot& snap = *loaded.value();
    std::lock_guard lock(dispatch_mutex);
    for (RouterEvent& e : snap.events) indexer.enqueue_event(std::move(e));
    if (indexer.flush() != IndexerStatus::ok) return BusError{NATS_ERR, "indexer offline while restoring"};
    for (const auto& [stream, id] : snap.watermarks) sequencer.restore(stream, id);
    dispatched_sequence = snap.stream_sequence;
    restored_sequence = snap.stream_sequence;
    {
      std::lock_guard ack_lock(ack_mutex);
      acked_sequence = snap.stream_sequence;
    }
    spdlog::info("restored snapshot {}: {} streams, stream sequence {}", snap.id, snap.watermarks.size(),
                 snap.stream_sequence);
    return {};
  }

  // ---- queries ----------------------------------------------------------------------------------

  // Every reply goes through here: one that does not fit the server's max_payload is chunked for a
  // requester that accepts chunks, else answered with a reply_too_large error (chunked_reply.h), so
  // a requester never waits for a reply that vanished. A publish failure is counted and logged.
  void reply(const Message& request, std::string_view body) {
    if (request.reply().empty()) return;
    auto sent = send_reply(query_conn, request, body, request.subject());
    if (sent.ok() && sent.value() == ReplyShape::too_large) reply_too_large_total->inc();
    if (!sent.ok()) {
      reply_failures_total->inc();
      if (const auto v = warnings.admit("reply_failure"); v.log) {
        spdlog::warn("reply on {} failed: {}{}", request.subject(), sent.error().message, suppressed_note(v));
      }
    } else if (sent.value() == ReplyShape::too_large) {
      if (const auto v = warnings.admit("reply_too_large"); v.log) {
        spdlog::warn("a reply on {} of {} bytes exceeds the server's max_payload; answered reply_too_large{}",
                     request.subject(), body.size(), suppressed_note(v));
      }
    }
  }

  void on_scores(Message msg) {
    const auto t0 = Clock::now();
    auto request = decode_score_request(msg.data(), config.query_limits);
    if (!request.ok()) {
      const CodecError& error = request.error();
      queries_rejected[static_cast<std::size_t>(error.kind)]->inc();
      if (const auto v = warnings.admit(fmt::format("query_rejected:{}", to_string(error.kind))); v.log) {
        spdlog::warn("score query of {} bytes rejected ({}): {}{}", msg.data().size(), to_string(error.kind),
                     error.message(), suppressed_note(v));
      }
      reply(msg, encode_error_reply({"bad_request", error.message()}));
    } else {
      const ScoreRequest& r = request.value();
      reply(msg, encode_score_reply(make_score_reply(indexer.find_matches(r.local_hashes, r.early_exit), load.snapshot())));
    }
    query_latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
  }

  Json queries_rejected_json() const {
    Json out = Json::object();
    for (std::size_t k = 0; k < kCodecErrorKinds; ++k) {
      out[std::string(to_string(static_cast<CodecErrorKind>(k)))] = queries_rejected[k]->value();
    }
    return out;
  }

  Json stats_json() {
    const ShardSizes sizes = indexer.shard_sizes();
    const ServiceStats s = snapshot_stats();
    const Readiness ready = readiness();
    return Json{{"ready", ready.ready},
                {"not_ready_reason", ready.reason},
                {"snapshot_stale", ready.snapshot_stale},
                {"snapshot_age_seconds", snapshots ? Json(snapshot_age_seconds()) : Json(nullptr)},
                {"snapshot_failures", s.snapshot_failures},
                {"workers", indexer.get_workers().size()},
                {"streams", sizes.worker_count},
                {"blocks", sizes.block_count},
                {"nodes", sizes.node_count},
                {"blocks_pending_cleanup", sizes.blocks_pending_cleanup},
                {"lanes", indexer.lane_count()},
                {"mode", config.mode == IngestMode::jetstream ? "jetstream" : "core"},
                {"messages", s.messages},
                {"events_applied", s.events_applied},
                {"duplicates", s.duplicates},
                {"gaps", s.gaps},
                {"missing_events", s.missing_events},
                {"resets", s.resets},
                {"dead_letters", s.dead_letters},
                {"dead_letters_truncated", s.dead_letters_truncated},
                {"dead_letter_failures", s.dead_letter_failures},
                {"stream_limit_rejections", s.stream_limit_rejections},
                {"max_streams", config.max_streams},
                {"queries_rejected", s.queries_rejected},
                {"queries_rejected_by_reason", queries_rejected_json()},
                {"dispatched_sequence", s.dispatched_sequence},
                {"acked_sequence", s.acked_sequence},
                {"restored_sequence", s.restored_sequence},
                {"history_trimmed", s.history_trimmed},
                {"consumer_resets", consumer_resets_total->value()},
                {"stream_holes", stream_holes_total->value()},
                {"snapshots_written", s.snapshots_written},
                {"local_batches", s.local_batches},
                {"apply_parent_not_found", indexer.metrics().applied_with(ApplyStatus::parent_not_found)},
                {"apply_block_not_found", indexer.metrics().applied_with(ApplyStatus::block_not_found)},
                {"apply_invalid", indexer.metrics().applied_with(ApplyStatus::invalid)},
                {"active_requests", load.live_requests()}};
  }

  void on_admin(Message msg) {
    const auto t0 = Clock::now();
    const std::string_view subject = msg.subject();
    try {
      if (subject == subjects.admin_stats()) {
        reply(msg, stats_json().dump());
      } else if (subject == subjects.admin_workers()) {
        WorkersReply workers{indexer.get_workers(), {}};
        for (const auto& [stream, blocks] : indexer.tree().stream_block_counts()) workers.streams.push_back({stream, blocks});
        reply(msg, encode_workers_reply(workers));
      } else if (subject == subjects.admin_remove_worker()) {
        // NOTE: handled by on_remove_worker, on every replica (see start_queries); the queue group
        // member that also receives it stays silent.
        return;
      } else if (subject == subjects.admin_dump()) {
        send_dump(msg);
      } else {
        reply(msg, encode_error_reply({"bad_request", "unknown admin subject " + std::string(subject)}));
      }
    } catch (const std::exception& e) {
      reply(msg, encode_error_reply({"internal", e.what()}));
    }
    admin_latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
  }

  // kv.admin.remove_worker {"worker_id":W,"dp_rank"?:R}: every replica receives it (a plain
  // subscription, not the queue group) and removes the worker/rank from its own index, then
  // replies; the requester reads the first reply (request/reply takes one), {"ok":true} or an
  // error. Replicas that are not running at that moment do not see it (see service.h).
  void on_remove_worker(Message msg) {
    const auto t0 = Clock::now();
    try {
      auto request = decode_remove_worker_request(msg.data());
      if (!request.ok()) {
        reply(msg, encode_error_reply({"bad_request", request.error().message()}));
      } else {
        const RemoveWorkerRequest& r = request.value();
        IndexerStatus status;
        {
          std::lock_guard lock(dispatch_mutex);
          if (r.dp_rank) {
            status = indexer.reset_worker_dp_rank_and_wait(r.worker_id, *r.dp_rank);
            sequencer.forget({r.worker_id, *r.dp_rank});
          } else {
            status = indexer.remove_worker(r.worker_id);
            sequencer.forget_worker(r.worker_id);
            load.remove_worker(r.worker_id);
          }
        }
        if (status != IndexerStatus::ok) reply(msg, encode_error_reply({"unavailable", "indexer offline"}));
        else reply(msg, encode_ok_reply());
      }
    } catch (const std::exception& e) {
      reply(msg, encode_error_reply({"internal", e.what()}));
    }
    admin_latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
  }

  // kv.admin.dump protocol: the requester sends a request with a reply inbox and keeps reading that
  // inbox. kvidx answers with N >= 0 chunk messages (header Kvidx-Dump: chunk; body: JSONL, one
  // Stored RouterEvent per line, each message under the server's max payload as read now; a long
  // edge is split over several chained events by EventChunker, the one step snapshots use too),
  // then one end marker (header Kvidx-Dump: end; body {"end":true,"events":E,"chunks":N}, E and
  // N counting what was sent). A failure, before or midway, ends the dump with one end marker
  // {"error":{...}}: a dump is never silently short.
  void send_dump(const Message& request) {
    if (request.reply().empty()) return;
    const std::string inbox(request.reply());
    const std::int64_t max_payload = query_conn.max_payload();
    auto send = [&](std::string_view body, const char* kind) -> BusStatus {
      // NOTE: as in send_reply: nothing goes to nats.c's reconnect buffer (see chunked_reply.cpp).
      if (!query_conn.connected() || query_conn.max_payload() != max_payload) {
        return BusError{NATS_CONNECTION_DISCONNECTED, "NATS reconnected during the dump"};
      }
      auto m = Message::create(inbox, body);
      if (!m.ok()) return m.error();
      if (auto s = m.value().set_header(kDumpHeader, kind); !s.ok()) return s;
      return query_conn.publish(m.value());
    };
    auto fail = [&](const std::string& code, const std::string& message) {
      spdlog::warn("dump failed: {}", message);
      if (auto s = send(encode_error_reply({code, message}), kDumpEnd); !s.ok()) {
        reply_failures_total->inc();
        spdlog::warn("dump error marker could not be sent: {}", s.error().message);
      }
    };
    auto events = indexer.dump_events();
    if (!events) {
      fail("unavailable", "indexer offline");
      return;
    }
    std::size_t sent = 0;
    EventChunker chunker(chunk_body_limit(max_payload), [&](std::string_view body) -> BusStatus {
      if (auto s = send(body, kDumpChunk); !s.ok()) return s;
      // NOTE: pace large dumps so the requester's pending limits are not overrun.
      if (++sent % 64 == 0) query_conn.flush(2000);
      return {};
    });
    for (const RouterEvent& e : *events) {
      if (auto s = chunker.add(e); !s.ok()) {
        fail("internal", "dump failed after " + std::to_string(chunker.chunks()) + " chunk(s): " + s.error().message);
        return;
      }
    }
    if (auto s = chunker.finish(); !s.ok()) {
      fail("internal", "dump failed after " + std::to_string(chunker.chunks()) + " chunk(s): " + s.error().message);
      return;
    }
    if (auto s = send(encode_dump_end({chunker.lines(), chunker.chunks()}), kDumpEnd);
        !s.ok()) {
      reply_failures_total->inc();
      spdlog::warn("dump end marker could not be sent: {}", s.error().message);
    }
  }

  // <prefix>.routing.decisions (approximate mode): the router's choice for one request
  // (libcodec/router_messages_codec.h). A reply, when asked for, is {"ok":true} or an error reply.
  void on_routing_decision(Message msg) {
    std::string problem;
    auto decision = decode_routing_decision(msg.data(), config.query_limits);
    if (!decision.ok()) {
      problem = decision.error().message();
    } else {
      RoutingDecision& d = decision.value();
      if (!d.sequence_hashes) d.sequence_hashes = compute_sequence_hashes(d.local_hashes);
      switch (indexer.process_routing_decision(d.stream, d.local_hashes, *d.sequence_hashes)) {
        case RoutingDecisionStatus::recorded: break;
        case RoutingDecisionStatus::length_mismatch: problem = "local_hashes and sequence_hashes differ in length"; break;
        case RoutingDecisionStatus::not_approximate: problem = "approximate mode is off"; break;
        case RoutingDecisionStatus::offline: problem = "indexer offline"; break;
      }
    }
    if (!problem.empty()) {
      if (const auto v = warnings.admit("routing_decision_rejected"); v.log) {
        spdlog::warn("routing decision rejected: {}{}", problem, suppressed_note(v));
      }
      reply(msg, encode_error_reply({"bad_request", problem}));
      return;
    }
    reply(msg, encode_ok_reply());
  }

  // <prefix>.requests.<worker_id> lifecycle messages (ActiveLoad; libcodec/router_messages_codec.h).
  void on_request_lifecycle(Message msg) {
    const auto worker = subjects.worker_from_requests_subject(msg.subject());
    LoadStatus status = LoadStatus::ok;
    std::string problem;
    auto message = decode_request_lifecycle(msg.data(), config.query_limits);
    if (!message.ok()) {
      problem = message.error().message();
    } else {
      const RequestLifecycle& m = message.value();
      switch (m.op) {
        case LifecycleOp::admit:
          if (!worker) problem = "no worker id in subject";
          else status = load.admit({*worker, m.dp_rank}, m.request_id, m.block_hashes).status;
          break;
        case LifecycleOp::output: status = load.append_output(m.request_id, m.block_hash); break;
        case LifecycleOp::fraction: status = load.set_fraction(m.request_id, m.fraction); break;
        case LifecycleOp::finish: status = load.finish(m.request_id).status; break;
      }
    }
    if (problem.empty() && status != LoadStatus::ok) problem = std::string(to_string(status));
    if (problem.empty()) {
      lifecycle_total->inc();
      reply(msg, encode_ok_reply());
    } else {
      lifecycle_rejected->inc();
      if (const auto v = warnings.admit("lifecycle_rejected"); v.log) {
        spdlog::warn("request lifecycle message on {} rejected: {}{}", untrusted_excerpt(msg.subject()), problem,
                     suppressed_note(v));
      }
      reply(msg, encode_error_reply({"bad_request", problem}));
    }
  }

  // Liveness. A NATS connection closed for good (reconnects exhausted, or closed by the server for
  // a protocol violation) never comes back by itself: the process must be restarted.
  bool alive() const {
    if (!healthy.load()) return false;
    if (!connections_made.load(std::memory_order_acquire)) return true;
    return !ingest_conn.closed() && !query_conn.closed();
  }

  // See Readiness (service.h). Cheap: atomics and one short lock.
  Readiness readiness() {
    Readiness r;
    r.snapshot_stale = snapshot_stale();
    if (!serving.load()) {
      r.reason = started ? "stopped" : "starting: restoring the newest snapshot and subscribing";
    } else if (!alive()) {
      r.reason = healthy.load() ? "a NATS connection is closed for good" : "indexer offline";
    } else if (!caught_up.load()) {
      std::lock_guard lock(ack_mutex);
      r.reason = "catching up: applied and acknowledged the events stream up to sequence " +
                 std::to_string(acked_sequence) + " of " + std::to_string(catch_up_target) + " (its end at start)";
    } else if (r.snapshot_stale) {
      r.reason = fmt::format("snapshot stale: the newest good snapshot is {:.1f} s old (bound {:.1f} s)",
                             snapshot_age_seconds(), snapshot_stale_bound().count() / 1000.0);
    } else {
      r.ready = true;
    }
    return r;
  }

  // Caller holds ack_mutex. Latches caught_up once the acknowledged sequence reaches the stream's
  // end as it was at start.
  void note_catch_up() {
    if (caught_up.load(std::memory_order_relaxed) || acked_sequence < catch_up_target) return;
    caught_up.store(true);
    spdlog::info("caught up with the events stream (sequence {}, its end at start) in {:.1f} s", catch_up_target,
                 std::chrono::duration<double>(Clock::now() - started_at).count());
  }

  ServiceStats snapshot_stats() {
    ServiceStats s;
    s.messages = messages_total->value();
    for (int k = 0; k < 3; ++k) {
      s.events_applied += events_by[k][0]->value();
      s.duplicates += events_by[k][1]->value();
    }
    s.gaps = gaps_total->value();
    s.missing_events = missing_total->value();
    s.resets = resets_total->value();
    s.dead_letters = dead_letters_total->value();
    s.dead_letters_truncated = dead_letters_truncated->value();
    for (const Counter* c : dead_letter_failures) s.dead_letter_failures += c->value();
    s.stream_limit_rejections = stream_limit_rejections->value();
    for (const Counter* c : queries_rejected) s.queries_rejected += c->value();
    s.snapshots_written = snapshots_total->value();
    s.snapshot_failures = snapshot_failures_total->value();
    s.local_batches = local_batches_total->value();
    {
      std::lock_guard lock(ack_mutex);
      s.acked_sequence = acked_sequence;
    }
    {
      std::lock_guard lock(dispatch_mutex);
      s.dispatched_sequence = dispatched_sequence;
      s.restored_sequence = restored_sequence;
      s.history_trimmed = history_trimmed;
    }
    for (const auto& sub : core_subs) s.core_dropped += sub.dropped();
    return s;
  }

  // ---- lifecycle --------------------------------------------------------------------------------

  BusStatus start() {
    started_at = Clock::now();
    ConnectionOptions ingest_opts;
    ingest_opts.url = config.nats_url;
    ingest_opts.name = "kvidx-ingest-" + config.durable;
    auto ic = Connection::connect(ingest_opts);
    if (!ic.ok()) return ic.error();
    ingest_conn = std::move(ic).value();
    ConnectionOptions query_opts = ingest_opts;
    query_opts.name = "kvidx-query-" + config.durable;
    query_opts.send_asap = true;
    auto qc = Connection::connect(query_opts);
    if (!qc.ok()) return qc.error();
    query_conn = std::move(qc).value();
    connections_made.store(true, std::memory_order_release);

    if (config.mode == IngestMode::jetstream) {
      if (auto s = start_jetstream(); !s.ok()) return s;
    }
    if (config.serve_queries) {
      if (auto s = start_queries(); !s.ok()) return s;
    }
    if (config.mode == IngestMode::core) {
      std::vector<std::string> subjects_to_read{subjects.events_wildcard()};
      subjects_to_read.insert(subjects_to_read.end(), config.extra_subjects.begin(), config.extra_subjects.end());
      for (const std::string& subject : subjects_to_read) {
        CoreIngest* state = core_ingest.emplace_back(std::make_unique<CoreIngest>()).get();
        auto sub = ingest_conn.subscribe(subject, [this, state](Message msg) { on_core_message(*state, msg); });
        if (!sub.ok()) return sub.error();
        // NOTE: core mode is best effort, but the client should never be the one dropping.
        if (auto s = sub.value().set_unlimited_pending(); !s.ok()) return s;
        state->sub.store(sub.value().raw(), std::memory_order_release);
        core_subs.push_back(std::move(sub).value());
      }
      if (auto s = ingest_conn.flush(); !s.ok()) return s;
    }
    started = true;
    {
      std::lock_guard lock(dispatch_mutex);
      local_open = true;
    }
    if (config.mode == IngestMode::core) caught_up = true;  // nothing to catch up with: ready once subscribed
    serving = true;
    spdlog::info("kvidx serving: mode {}, {} lanes, prefix '{}', {}", config.mode == IngestMode::jetstream ? "jetstream" : "core",
                 indexer.lane_count(), subjects.prefix(), redact_url(config.nats_url));
    return {};
  }

  BusStatus start_jetstream() {
    auto j = JetStream::create(ingest_conn);
    if (!j.ok()) return j.error();
    js.emplace(std::move(j).value());
    std::vector<std::string> stream_subjects{subjects.events_wildcard()};
    stream_subjects.insert(stream_subjects.end(), config.extra_subjects.begin(), config.extra_subjects.end());
    const StreamSpec events_stream{config.stream, stream_subjects, true, 0, config.stream_max_age.count(),
                                   config.stream_max_bytes};
    if (auto s = js->ensure_stream(events_stream); !s.ok()) return s.error();
    // NOTE: the chunk size follows the server's max_payload as it is at each write (a reconnect to
    // a server with another max_payload changes it), so it is read there, not here.
    snapshots.emplace(*js, ingest_conn, subjects, config.snapshot_stream, config.durable);
    if (auto s = snapshots->ensure_stream(); !s.ok()) return s;
    if (config.restore_snapshot) {
      if (auto s = restore(); !s.ok()) return s;
    }
    last_good_snapshot.store(Clock::now().time_since_epoch().count());
    metrics.gauge_callback("kvidx_snapshot_age_seconds",
                           "Seconds since the newest good snapshot (this process's last written, or its start)", {},
                           [this] { return snapshot_age_seconds(); });
    metrics.gauge_callback("kvidx_snapshot_stale", "1 while the newest good snapshot is older than the stale bound", {},
                           [this] { return snapshot_stale() ? 1.0 : 0.0; });
    // NOTE: the durable is re-created at every start so it delivers exactly from what the restored
    // state covers (snapshot sequence + 1, or the whole stream without a snapshot). Acks within a
    // run keep redeliveries away; across restarts the snapshot is the source of truth.
    auto state = js->stream_state(config.stream);
    if (!state.ok()) return state.error();
    {
      // NOTE: readiness waits for the stream's end as it is now, before the consumer starts; an
      // empty stream (nothing to deliver, even if its sequence is past 0) needs no catching up.
      std::lock_guard lock(ack_mutex);
      catch_up_target = state.value().messages == 0 ? 0 : state.value().last_sequence;
      note_catch_up();
    }
    if (state.value().first_sequence > restored_sequence + 1) {
      std::lock_guard lock(dispatch_mutex);
      history_trimmed = state.value().first_sequence - restored_sequence - 1;
      spdlog::warn("stream {} starts at sequence {} but this replica's state covers only up to {}: {} message(s) "
                   "discarded by retention are not reflected (workers' later events repair their streams)",
                   config.stream, state.value().first_sequence, restored_sequence, history_trimmed);
    }
    ConsumerSpec spec;
    spec.durable = config.durable;
    spec.ack_all = true;
    spec.max_ack_pending = static_cast<std::int64_t>(config.max_inflight_events) + config.fetch_batch;
    spec.start_sequence = restored_sequence == 0 ? 0 : restored_sequence + 1;
    auto p = OrderedStreamReader::open(ingest_conn, *js, config.stream, spec);
    if (!p.ok()) return p.error();
    pull.emplace(std::move(p).value());
    fetch_thread = std::thread([this] { fetch_loop(); });
    dispatch_thread = std::thread([this] { dispatch_loop(); });
    ack_thread = std::thread([this] { ack_loop(); });
    if (config.snapshot_interval.count() > 0) snapshot_thread = std::thread([this] { snapshot_loop(); });
    return {};
  }

  BusStatus start_queries() {
    auto add = [&](const std::string& subject, void (Impl::*handler)(Message)) -> BusStatus {
      auto sub = query_conn.queue_subscribe(subject, kQueueGroup, [this, handler](Message m) { (this->*handler)(std::move(m)); });
      if (!sub.ok()) return sub.error();
      query_subs.push_back(std::move(sub).value());
      return {};
    };
    if (auto s = add(subjects.query_scores(), &Impl::on_scores); !s.ok()) return s;
    if (auto s = add(subjects.admin_wildcard(), &Impl::on_admin); !s.ok()) return s;
    // NOTE: worker removal changes every replica's index, so it is a plain subscription too: a
    // queue group would let exactly one replica remove the worker and the others keep serving its
    // blocks. (A removal record in the events stream would also reach replicas that are down now;
    // see service.h.)
    auto removal = query_conn.subscribe(subjects.admin_remove_worker(),
                                        [this](Message m) { on_remove_worker(std::move(m)); });
    if (!removal.ok()) return removal.error();
    query_subs.push_back(std::move(removal).value());
    // NOTE: lifecycle messages update shared load state; every replica must see them, so they are
    // a plain subscription, not the queue group.
    if (config.approximate) {
      // NOTE: like events, decisions change every replica's index: a plain subscription.
      auto decisions = query_conn.subscribe(subjects.routing_decisions(),
                                            [this](Message m) { on_routing_decision(std::move(m)); });
      if (!decisions.ok()) return decisions.error();
      query_subs.push_back(std::move(decisions).value());
    }
    auto lifecycle = query_conn.subscribe(subjects.requests_wildcard(),
                                          [this](Message m) { on_request_lifecycle(std::move(m)); });
    if (!lifecycle.ok()) return lifecycle.error();
    query_subs.push_back(std::move(lifecycle).value());
    return query_conn.flush();
  }

  void stop(bool final_snapshot) {
    if (stopped) return;
    serving = false;
    {
      std::lock_guard lock(snapshot_timer_mutex);
      stopped = true;
    }
    snapshot_timer_cv.notify_all();
    if (snapshot_thread.joinable()) snapshot_thread.join();
    // 1. stop pulling / receiving (in-process sources included)
    {
      std::lock_guard lock(dispatch_mutex);
      local_open = false;
    }
    {
      std::lock_guard lock(ack_mutex);
      stop_fetch = true;
    }
    space_cv.notify_all();
    if (fetch_thread.joinable()) fetch_thread.join();
    {
      std::lock_guard lock(ack_mutex);
      stop_dispatch = true;
    }
    dispatch_cv.notify_all();
    if (dispatch_thread.joinable()) dispatch_thread.join();
    core_subs.clear();  // waits for the delivery threads to return
    for (auto& state : core_ingest) flush_core_burst(*state);
    // 2. drain lanes and acks
    {
      std::lock_guard lock(ack_mutex);
      stop_acker = true;
    }
    ack_cv.notify_all();
    if (ack_thread.joinable()) ack_thread.join();
    indexer.flush();
    if (ingest_conn.valid()) ingest_conn.flush(2000);
    // 3. final snapshot
    if (final_snapshot && started && snapshots) {
      if (auto s = write_snapshot(); !s.ok()) spdlog::warn("final snapshot failed: {}", s.error().message);
    }
    query_subs.clear();
    pull.reset();
    snapshots.reset();
    js.reset();
    healthy = false;
    for (const auto& [kind, count] : warnings.take_suppressed()) {
      spdlog::warn("{} more '{}' warning(s) were not logged since the previous such line (see the counters)", count, kind);
    }
  }
};

KvidxService::KvidxService(ServiceConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

KvidxService::~KvidxService() {
  if (impl_) impl_->stop(false);
}

BusStatus KvidxService::start() { return impl_->start(); }
void KvidxService::stop(bool final_snapshot) { impl_->stop(final_snapshot); }
BusStatus KvidxService::snapshot_now() { return impl_->write_snapshot(); }
BusStatus KvidxService::ingest_local_events(std::span<const RouterEvent> events) {
  return impl_->ingest_local(events);
}

bool KvidxService::wait_for_acked_sequence(std::uint64_t sequence, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->ack_mutex);
  return impl_->acked_cv.wait_for(lock, timeout, [&] { return impl_->acked_sequence >= sequence; });
}

ServiceStats KvidxService::stats() const { return impl_->snapshot_stats(); }
std::string KvidxService::render_metrics() const { return impl_->metrics.render(); }
bool KvidxService::healthy() const { return impl_->alive(); }
Readiness KvidxService::readiness() const { return impl_->readiness(); }
MetricsRegistry& KvidxService::metrics() { return impl_->metrics; }
LaneIndexer& KvidxService::indexer() { return impl_->indexer; }
ActiveLoad& KvidxService::active_load() { return impl_->load; }

}  // namespace kvidx::bus
