// NatsEventSink: publishes each RouterEvent as one message on <prefix>.events.<worker_id>, as a
// Dynamo worker would, through JetStream (each engine batch waits for the server's acks) or core
// NATS (each engine batch ends with a flush). Owns its Connection (and JetStream context).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "bridge/router_event_sink.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"
#include "libbus/nats_jetstream.h"
#include "libbus/subjects.h"

namespace kvidx::bridge {

struct NatsSinkOptions {
  std::string url = "nats://127.0.0.1:4222";
  bus::NatsAuth auth;  // credentials and TLS (nats_connection.h)
  bool jetstream = true;
  std::string subject_prefix = "kv";
  // JetStream: the stream that must capture the subjects (checked at connect: an async publish to
  // an uncaptured subject would only fail in a callback).
  std::string stream = "KV_EVENTS";
  std::int64_t ack_timeout_ms = 10000;
};

class NatsEventSink final : public RouterEventSink {
 public:
  static bus::BusResult<std::unique_ptr<NatsEventSink>> connect(const NatsSinkOptions& options);

  SinkStatus deliver(std::span<const RouterEvent> events) override;
  std::uint64_t published() const { return published_; }

 private:
  NatsEventSink(NatsSinkOptions options, bus::Connection connection, std::optional<bus::JetStream> js)
      : options_(std::move(options)),
        subjects_(options_.subject_prefix),
        connection_(std::move(connection)),
        js_(std::move(js)) {}

  NatsSinkOptions options_;
  bus::Subjects subjects_;
  bus::Connection connection_;
  std::optional<bus::JetStream> js_;  // declared after connection_: destroyed first
  std::uint64_t published_ = 0;
};

}  // namespace kvidx::bridge
