// Owning wrapper for a nats.c JetStream context (jsCtx) plus the stream/consumer administration
// kvidx needs (there is no natscli on the target machines, so all admin is done in code).
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"
#include "libbus/nats_message.h"
#include "libbus/nats_subscription.h"

namespace kvidx::bus {

// The server's answers to a context's async publishes, counted as they arrive (on a nats.c thread).
// A publish is acknowledged when JetStream stored it; `failed` counts the negative answers (no
// stream captures the subject, a stream limit, ...) and publishes that timed out waiting for one.
struct AsyncPublishAcks {
  std::atomic<std::uint64_t> acked{0};
  std::atomic<std::uint64_t> failed{0};
  std::string first_error() const;

  void record_error(std::string error);

 private:
  mutable std::mutex mutex_;
  std::string first_error_;
};

struct JetStreamOptions {
  std::int64_t api_wait_ms = 5000;
  std::int64_t publish_async_max_pending = 4000;
  // How long js_PublishAsync blocks when max pending is reached (nats.c's default 200 ms is too short).
  std::int64_t publish_async_stall_wait_ms = 5000;
  // When set, every async publish's answer is counted there (it must outlive the context).
  AsyncPublishAcks* publish_acks = nullptr;
};

struct StreamSpec {
  std::string name;
  std::vector<std::string> subjects;
  bool file_storage = true;
  std::int64_t max_msgs_per_subject = 0;  // 0: unlimited
  std::int64_t max_age_ms = 0;            // 0: unlimited
  std::int64_t max_bytes = 0;             // 0: unlimited (oldest messages are discarded past it)
  // Copies of every message on a cluster (1: one server holds it; 3 survives the loss of any one
  // of three). 0: keep an existing stream's count, and create a new one with `new_replicas`.
  int replicas = 0;
  int new_replicas = 1;
};

struct StreamState {
  std::uint64_t messages = 0;
  std::uint64_t first_sequence = 0;
  std::uint64_t last_sequence = 0;
  int replicas = 1;           // the stream's replica count (ensure_stream: after the call)
  int previous_replicas = 0;  // ensure_stream: the count before the call (0: the stream was created)
};

struct ConsumerSpec {
  std::string durable;               // no '.' allowed
  std::string filter_subject;        // empty: the whole stream
  bool ack_all = true;               // AckAll: acking sequence N acknowledges everything before it
  std::int64_t max_ack_pending = 0;  // 0: server default
  std::int64_t ack_wait_ms = 30000;
  std::uint64_t start_sequence = 0;  // 0: deliver all; else deliver from this stream sequence
};

struct ConsumerState {
  std::uint64_t delivered_stream_sequence = 0;
  std::uint64_t ack_floor_stream_sequence = 0;
  std::uint64_t num_pending = 0;
  std::int64_t num_ack_pending = 0;
};

struct PublishAck {
  std::string stream;
  std::uint64_t sequence = 0;
  bool duplicate = false;
};

class JetStream {
 public:
  JetStream() = default;
  JetStream(JetStream&& other) noexcept
      : js_(std::exchange(other.js_, nullptr)),
        nc_(std::exchange(other.nc_, nullptr)),
        api_wait_ms_(other.api_wait_ms_) {}
  JetStream& operator=(JetStream&& other) noexcept;
  JetStream(const JetStream&) = delete;
  JetStream& operator=(const JetStream&) = delete;
  ~JetStream();

  static BusResult<JetStream> create(Connection& connection, const JetStreamOptions& options = {});

  // Creates the stream, or updates its subjects/limits (and its replica count, when spec.replicas
  // is set) if it exists. An existing stream keeps its replica count when spec.replicas is 0.
  // A call that timed out (a fresh cluster placing the stream) is retried a few times.
  BusResult<StreamState> ensure_stream(const StreamSpec& spec);
  BusResult<StreamState> stream_state(std::string_view stream);
  // Polls the stream's info until it has a leader (a single server: at once), at most 3 API waits.
  BusStatus wait_for_leader(const std::string& stream);
  BusStatus delete_stream(std::string_view stream);
  // Removes messages of `subject` (all subjects when empty), keeping the newest `keep` of them
  // (none when 0).
  BusStatus purge(std::string_view stream, std::string_view subject, std::uint64_t keep);

  // Returns the existing durable's state, or creates it from `spec`.
  BusResult<ConsumerState> ensure_consumer(std::string_view stream, const ConsumerSpec& spec);
  BusResult<ConsumerState> consumer_state(std::string_view stream, std::string_view durable);
  BusStatus delete_consumer(std::string_view stream, std::string_view durable);

  BusResult<PublishAck> publish(std::string_view subject, std::string_view data);
  BusResult<PublishAck> publish(Message& message);
  BusStatus publish_async(std::string_view subject, std::string_view data);
  BusStatus publish_async_complete(std::int64_t timeout_ms);

  // Direct reads by sequence / last message on a subject (NATS_NOT_FOUND when absent).
  BusResult<Message> get_message(std::string_view stream, std::uint64_t sequence);
  BusResult<Message> get_last_message(std::string_view stream, std::string_view subject);

  jsCtx* raw() const { return js_; }

 private:
  BusResult<StreamState> ensure_stream_once(const StreamSpec& spec);
  // A failed API call; a timeout caused by a permissions violation (the server never answers a
  // request it refused) says so, with the server's text.
  BusError fail(natsStatus status, jsErrCode code, std::string_view context) const;

  jsCtx* js_ = nullptr;
  natsConnection* nc_ = nullptr;  // the connection js_ was made from (outlives it)
  std::int64_t api_wait_ms_ = 5000;
};

}  // namespace kvidx::bus
