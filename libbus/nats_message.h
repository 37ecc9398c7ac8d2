// Owning wrappers for nats.c messages: `Message` owns one natsMsg (destroyed exactly once, here),
// and `fetch` results arrive as a vector of Messages. This is the only place in kvidx that calls
// natsMsg_Destroy; everything else moves Messages around.
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libbus/nats_error.h"

namespace kvidx::bus {

// JetStream delivery metadata of a message received from a consumer.
struct JsMetadata {
  std::uint64_t stream_sequence = 0;
  std::uint64_t consumer_sequence = 0;
  std::uint64_t num_delivered = 0;
  std::uint64_t num_pending = 0;
};

class Message {
 public:
  Message() = default;
  explicit Message(natsMsg* msg) noexcept : msg_(msg) {}  // takes ownership
  Message(Message&& other) noexcept : msg_(std::exchange(other.msg_, nullptr)) {}
  Message& operator=(Message&& other) noexcept;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message();

  // A new message to publish with headers (natsConnection_PublishMsg / js publish).
  static BusResult<Message> create(std::string_view subject, std::string_view data, std::string_view reply = {});

  bool valid() const { return msg_ != nullptr; }
  std::string_view subject() const;
  std::string_view reply() const;  // empty when the sender expects no reply
  std::string_view data() const;
  // The first value of header `key`, if present.
  std::optional<std::string> header(const char* key) const;
  // The server's "no responders" status (503): a request nobody was subscribed to.
  bool no_responders() const { return msg_ != nullptr && natsMsg_IsNoResponders(msg_); }
  BusStatus set_header(const char* key, const char* value);

  // JetStream delivery metadata (messages from a pull consumer; acknowledgements are sent with
  // jetstream_ack in nats_pull_consumer.h).
  BusResult<JsMetadata> metadata() const;
  // metadata().stream_sequence without allocating (parsed from the $JS.ACK reply subject); 0 when
  // this is not a message from a JetStream consumer.
  std::uint64_t stream_sequence() const;
  // The consumer (delivery) sequence of the same subject; 0 when not from a JetStream consumer.
  std::uint64_t consumer_sequence() const;
  // The stream sequence of a message read directly from a stream (JetStream::get_message,
  // get_last_message); 0 otherwise.
  std::uint64_t stored_sequence() const { return msg_ == nullptr ? 0 : natsMsg_GetSequence(msg_); }

  natsMsg* raw() const { return msg_; }
  natsMsg* release() noexcept { return std::exchange(msg_, nullptr); }

 private:
  natsMsg* msg_ = nullptr;
};

}  // namespace kvidx::bus
