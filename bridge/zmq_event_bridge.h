// ZmqEventBridge: one engine's ZMQ KV-event stream -> RouterEvents -> a RouterEventSink.
//
// Wire (vLLM's ZmqEventPublisher): the engine's PUB socket sends 3 frames
//   [topic, seq (8 bytes, big-endian, per publisher, from 0), msgpack KVEventBatch];
// its optional ROUTER replay socket answers a request [empty, start seq (8 bytes BE)] from our
// DEALER with one message per buffered batch with seq >= start, then an end marker whose seq is
// -1 (0xFF x 8) and whose payload is empty. Replies arrive as [empty, seq, payload] (older vLLM)
// or [empty, topic, seq, payload] (newer); both are accepted.
//
// Ordering rules (docs/wire-format.md "Ordering, gaps and recovery rules"), with `last`
// the seq of the last batch handed over:
//  - seq == last + 1: convert and deliver.
//  - seq >  last + 1: a gap of (seq - last - 1) batches. With a replay endpoint: request replay
//    from last + 1 and buffer live batches meanwhile; replayed batches are delivered in order as
//    they come, then the buffered live ones, in order (NOTE: delivering live batches during the
//    replay could resurrect blocks removed in between). A gap among the held live batches (a
//    batch lost while the replay ran) is filled from the answer's batches past the target when
//    the engine still had them; else it is counted when the drain reaches it and replayed in
//    turn, the batches after it held again. Whatever the engine's buffer could no longer supply is an
//    unrecoverable gap (so is every gap after a failed replay, until the held batches are
//    delivered). Without replay the gap is unrecoverable at once.
//    Unrecoverable: counted, event ids skipped by the lost batch count (so kvidx sees the gap
//    too), and with `clear_on_gap` a `cleared` is emitted per known rank first (re-sync).
//  - seq <= last on the live socket: the engine restarted (a PUB never repeats a seq): a
//    `cleared` per known rank, then the batch. During the drain after a replay, seq <= last is a
//    duplicate of a replayed batch and is skipped.
//  - first batch: delivered; with a replay endpoint and `catch_up_on_start`, a first seq > 0
//    first replays from 0 (what the engine still buffers) so a late start misses less.
//  - malformed frames (wrong frame count, seq not 8 bytes) are counted and dropped; an undecodable
//    payload with a valid seq is counted, advances `last` and skips one event id (lost batch).
// Replay requests time out after `replay_timeout` without a reply; the DEALER is then recreated
// so a late answer cannot be mistaken for the next replay's.
//
// Threading: start() connects the sockets and runs the loop on one thread, which owns the
// sockets, the converter and the sink calls; stats() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "bridge/router_event_sink.h"
#include "bridge/vllm_event_batch.h"
#include "bridge/vllm_event_converter.h"

namespace kvidx::bridge {

struct ZmqBridgeConfig {
  std::string endpoint = "tcp://127.0.0.1:5557";  // the engine's PUB socket (we connect)
  std::string replay_endpoint;                    // the engine's ROUTER replay socket; empty: none
  std::string topic;                              // SUB prefix filter; empty: every topic
  ConversionConfig conversion;
  bool clear_on_gap = false;
  bool catch_up_on_start = true;
  std::chrono::milliseconds replay_timeout{2000};
  std::size_t max_buffered_batches = 100000;  // live batches held during a replay; beyond: give up
  VllmDecodeLimits limits;
};

struct ZmqBridgeStats {
  std::uint64_t frames = 0;             // live messages received
  std::uint64_t batches_delivered = 0;  // batches converted and handed to the sink (live + replayed)
  std::uint64_t router_events = 0;      // RouterEvents handed to the sink
  std::uint64_t malformed_frames = 0;   // bad framing or undecodable payload
  std::uint64_t gaps = 0;               // gaps detected (recovered or not), each counted once
  std::uint64_t missing_batches = 0;    // batches missing across gaps (each ends replayed or lost)
  std::uint64_t replays_requested = 0;
  std::uint64_t replayed_batches = 0;     // delivered from the replay socket
  std::uint64_t replay_failures = 0;      // timed out or live buffer overflow
  std::uint64_t unrecovered_batches = 0;  // lost for good (ids skipped)
  std::uint64_t duplicate_batches = 0;    // already delivered (replay overlap)
  std::uint64_t restarts = 0;             // engine sequence went backwards
  std::uint64_t sink_failures = 0;        // deliveries the sink refused
  std::uint64_t last_seq = 0;
  bool have_last_seq = false;
  bool replaying = false;
  ConversionStats conversion;
};

class ZmqEventBridge {
 public:
  ZmqEventBridge(ZmqBridgeConfig config, RouterEventSink& sink);
  ~ZmqEventBridge();  // stop()
  ZmqEventBridge(const ZmqEventBridge&) = delete;
  ZmqEventBridge& operator=(const ZmqEventBridge&) = delete;

  // Creates and connects the sockets, then starts the loop thread. Error text on failure.
  SinkStatus start();
  // Stops and joins the loop (idempotent). A replay in progress is abandoned.
  void stop();

  ZmqBridgeStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvidx::bridge
