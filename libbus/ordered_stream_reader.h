// OrderedStreamReader: the service's read side of the events stream. Owns its durable consumer
// (AckAll; no filter: it delivers every message of the stream, or a shard's filter: every message
// of its subjects) and hands out messages in stream order without ever skipping one that exists.
// With a filter, gaps are seen in the consumer's delivery sequence instead (the stream sequences
// of the other subjects are skipped by design), and holes are not counted.
//
// NOTE: why ordering is enforced here: a message the server delivered but the client never received
// (in flight when the server or the connection went down) stays pending on the server until its
// ack wait runs out. With AckAll, acknowledging any later message would acknowledge it unseen, and
// the index would silently miss its events. So when a message arrives with a stream sequence past
// the next expected one, the reader drops it (and the rest of that fetch), re-creates the durable to
// deliver from the expected sequence and reads on from there. A gap that is still there right after
// such a re-creation (or at the first message after opening) is a hole in the stream itself
// (messages removed by retention or deleted): it is accepted and counted in holes().
// A durable deleted behind the reader's back (or lost by the server) is noticed within
// kIdleConsumerCheck of silence and re-created from the next expected sequence.
// Redeliveries (sequence <= last handed out) are passed on: the caller skips their events and their
// ack is harmless.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"
#include "libbus/nats_jetstream.h"
#include "libbus/nats_message.h"
#include "libbus/nats_pull_consumer.h"

namespace kvidx::bus {

class OrderedStreamReader {
 public:
  // Re-creates durable `spec.durable` on `stream` to deliver from `spec.start_sequence` (0: from the
  // beginning) and binds to it. `conn` and `js` must outlive the reader.
  static BusResult<OrderedStreamReader> open(Connection& conn, JetStream& js, std::string stream, ConsumerSpec spec);

  OrderedStreamReader(OrderedStreamReader&&) noexcept;
  OrderedStreamReader& operator=(OrderedStreamReader&&) = delete;
  OrderedStreamReader(const OrderedStreamReader&) = delete;
  OrderedStreamReader& operator=(const OrderedStreamReader&) = delete;
  ~OrderedStreamReader() = default;

  // Up to `batch` messages in stream order (see above), waiting at most `timeout_ms`. One thread.
  BusResult<std::vector<Message>> fetch(int batch, std::int64_t timeout_ms);

  // Highest stream sequence handed out so far (start sequence - 1 before the first).
  std::uint64_t last_sequence() const { return last_; }
  // Re-creations of the durable after a delivery gap or a lost consumer (thread-safe reads).
  std::uint64_t resets() const { return resets_.load(std::memory_order_relaxed); }
  // Stream messages that did not exist when read (retention, deletes).
  std::uint64_t holes() const { return holes_.load(std::memory_order_relaxed); }

 private:
  OrderedStreamReader(Connection& conn, JetStream& js, std::string stream, ConsumerSpec spec);
  // Deletes and re-creates the durable at last_ + 1 and binds a fresh pull consumer to it.
  BusStatus recreate();
  // After kIdleConsumerCheck without a message: is the durable still there? (else re-create it)
  void check_consumer_when_idle();

  static constexpr std::chrono::seconds kIdleConsumerCheck{5};

  Connection* conn_;
  JetStream* js_;
  std::string stream_;
  ConsumerSpec spec_;
  PullConsumer pull_;
  std::uint64_t last_ = 0;
  bool needs_recreate_ = false;
  bool accept_hole_ = true;          // the next message may start past last_ + 1 (fresh consumer)
  std::uint64_t last_consumer_ = 0;  // filtered: the highest delivery sequence received
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> resets_{0};
  std::atomic<std::uint64_t> holes_{0};
};

}  // namespace kvidx::bus
