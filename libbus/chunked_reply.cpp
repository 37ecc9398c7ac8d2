#include "libbus/chunked_reply.h"

#include <fmt/format.h>

#include "libbus/event_chunks.h"
#include "libcodec/chunked_reply_codec.h"
#include "libcodec/query_codec.h"

namespace kvidx::bus {

BusResult<ReplyShape> send_reply(Connection& conn, const Message& request, std::string_view body,
                                 std::string_view subject_hint) {
  const std::string inbox(request.reply());
  const std::int64_t max_payload = conn.max_payload();
  // NOTE: nothing is handed to nats.c's reconnect buffer: checked against the old server's
  // max_payload and flushed to a new one with a smaller limit, it would get the connection closed.
  auto not_connected = [] { return BusError{NATS_CONNECTION_DISCONNECTED, "not connected to NATS (reconnecting)"}; };
  if (!conn.connected()) return not_connected();
  if (static_cast<std::int64_t>(body.size()) <= max_payload) {
    if (auto s = conn.publish(inbox, body); !s.ok()) return s.error();
    return ReplyShape::plain;
  }
  if (request.header(kAcceptChunksHeader) == std::string("1")) {
    const std::size_t limit = chunk_body_limit(max_payload);
    std::size_t chunks = 0;
    for (std::size_t at = 0; at < body.size(); at += limit) {
      if (!conn.connected() || conn.max_payload() != max_payload) return not_connected();
      auto m = Message::create(inbox, body.substr(at, limit));
      if (!m.ok()) return m.error();
      if (auto s = m.value().set_header(kReplyPartHeader, "chunk"); !s.ok()) return s.error();
      if (auto s = conn.publish(m.value()); !s.ok()) return s.error();
      // NOTE: pace long replies so the requester's pending limits are not overrun.
      if (++chunks % 64 == 0) conn.flush(2000);
    }
    auto end = Message::create(inbox, encode_chunked_reply_end({body.size(), chunks}));
    if (!end.ok()) return end.error();
    if (auto s = end.value().set_header(kReplyPartHeader, "end"); !s.ok()) return s.error();
    if (auto s = conn.publish(end.value()); !s.ok()) return s.error();
    return ReplyShape::chunked;
  }
  const std::string error = encode_error_reply(
      {"reply_too_large",
       fmt::format("the reply to {} is {} bytes, over the NATS server's max_payload of {} bytes: send the request "
                   "with header '{}: 1' to receive it in chunks (kvidx score and kvidx stats do), or raise "
                   "max_payload in the nats-server config",
                   subject_hint, body.size(), max_payload, kAcceptChunksHeader)});
  if (auto s = conn.publish(inbox, error); !s.ok()) return s.error();
  return ReplyShape::too_large;
}

BusResult<std::string> request_accepting_chunks(Connection& conn, std::string_view subject, std::string_view body,
                                                std::int64_t timeout_ms) {
  const std::string inbox = conn.new_inbox();
  auto sub = conn.subscribe_sync(inbox);
  if (!sub.ok()) return sub.error();
  if (auto s = sub.value().set_unlimited_pending(); !s.ok()) return s.error();
  auto request = Message::create(subject, body, inbox);
  if (!request.ok()) return request.error();
  if (auto s = request.value().set_header(kAcceptChunksHeader, "1"); !s.ok()) return s.error();
  if (auto s = conn.publish(request.value()); !s.ok()) return s.error();
  if (auto s = conn.flush(); !s.ok()) return s.error();
  std::string out;
  std::size_t chunks = 0;
  const std::string where(subject);
  while (true) {
    auto message = sub.value().next(timeout_ms);
    if (!message.ok()) {
      if (chunks == 0) return BusError{NATS_TIMEOUT, fmt::format("no reply on {} within {} ms", where, timeout_ms)};
      return BusError{NATS_MISMATCH,
                      fmt::format("incomplete reply on {}: {} chunk(s), {} bytes, then nothing for {} ms "
                                  "(no end marker)",
                                  where, chunks, out.size(), timeout_ms)};
    }
    if (message.value().no_responders()) return BusError{NATS_NO_RESPONDERS, "no responders on " + where};
    const auto part = message.value().header(kReplyPartHeader);
    if (!part) {
      if (chunks == 0) return std::string(message.value().data());  // it fitted: one plain reply
      return BusError{NATS_MISMATCH, "incomplete reply on " + where + ": a plain message among the chunks"};
    }
    if (*part == "chunk") {
      out += message.value().data();
      ++chunks;
      continue;
    }
    // NOTE: an unreadable marker counts as 0 and 0, so it never matches a reply that had chunks.
    const auto end = decode_chunked_reply_end(message.value().data());
    const std::uint64_t want_bytes = end.ok() ? end.value().bytes : 0;
    const std::uint64_t want_chunks = end.ok() ? end.value().chunks : 0;
    if (*part != "end" || want_bytes != out.size() || want_chunks != chunks) {
      return BusError{NATS_MISMATCH, fmt::format("incomplete reply on {}: received {} chunk(s) and {} bytes, the end "
                                                 "marker says {} and {}",
                                                 where, chunks, out.size(), want_chunks, want_bytes)};
    }
    return out;
  }
}

}  // namespace kvidx::bus
