#include "bridge/nats_event_sink.h"

#include "libcodec/event_codec.h"

namespace kvidx::bridge {

bus::BusResult<std::unique_ptr<NatsEventSink>> NatsEventSink::connect(const NatsSinkOptions& options) {
  bus::ConnectionOptions connection_options;
  connection_options.url = options.url;
  connection_options.auth = options.auth;
  connection_options.name = "kvidx-bridge";
  auto connection = bus::Connection::connect(connection_options);
  if (!connection) return connection.error();
  std::optional<bus::JetStream> js;
  if (options.jetstream) {
    auto created = bus::JetStream::create(connection.value());
    if (!created) return created.error();
    js = std::move(created).value();
    if (auto state = js->stream_state(options.stream); !state) {
      bus::BusError error = state.error();
      error.message = "JetStream stream " + options.stream +
                      " not found (start kvidx serve first, or use core mode): " + error.message;
      return error;
    }
  }
  return std::unique_ptr<NatsEventSink>(new NatsEventSink(options, std::move(connection).value(), std::move(js)));
}

SinkStatus NatsEventSink::deliver(std::span<const RouterEvent> events) {
  if (events.empty()) return {};
  for (const RouterEvent& event : events) {
    const std::string subject = subjects_.events(event.worker_id);
    const std::string payload = encode_router_event(event);
    auto status = js_ ? js_->publish_async(subject, payload) : connection_.publish(subject, payload);
    if (!status) return SinkStatus(status.error().message);
  }
  // NOTE: one wait per engine batch keeps JetStream ordering and bounds what a crash can lose to
  // one batch, at the cost of a round trip per batch (engines publish one batch per step).
  auto done = js_ ? js_->publish_async_complete(options_.ack_timeout_ms) : connection_.flush(options_.ack_timeout_ms);
  if (!done) return SinkStatus(done.error().message);
  published_ += events.size();
  return {};
}

}  // namespace kvidx::bridge
