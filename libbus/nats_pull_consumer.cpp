#include "libbus/nats_pull_consumer.h"

#include <algorithm>
#include <string>

namespace kvidx::bus {
namespace {

using Clock = std::chrono::steady_clock;

// A request the server never answers (lost in a restart) is given up this long after it expired.
constexpr auto kLostRequestGrace = std::chrono::milliseconds(500);

// A JetStream status message: no payload and a "Status" header (nats.c parses the
// "NATS/1.0 408 Request Timeout" line into the Status and Description headers).
std::optional<std::string> status_of(const Message& m) {
  if (!m.data().empty()) return std::nullopt;
  return m.header("Status");
}

}  // namespace

BusResult<PullConsumer> PullConsumer::bind(Connection& conn, std::string_view stream, std::string_view durable) {
  PullConsumer c;
  c.conn_ = &conn;
  c.next_subject_ = "$JS.API.CONSUMER.MSG.NEXT." + std::string(stream) + "." + std::string(durable);
  c.inbox_ = conn.new_inbox();
  auto sub = conn.subscribe_sync(c.inbox_);
  if (!sub.ok()) return sub.error();
  c.sub_ = std::move(sub).value();
  // NOTE: what arrives is bounded by the requests sent (batch sizes), so no client-side drops.
  if (auto s = c.sub_.set_unlimited_pending(); !s.ok()) return s.error();
  return c;
}

BusStatus PullConsumer::send_request(int batch, std::int64_t expires_ms, bool no_wait) {
  const std::string body =
      "{\"batch\":" + std::to_string(batch) +
      (no_wait ? std::string(",\"no_wait\":true") : ",\"expires\":" + std::to_string(expires_ms * 1'000'000)) + "}";
  auto request = Message::create(next_subject_, body, inbox_);
  if (!request.ok()) return request.error();
  if (auto s = conn_->publish(request.value()); !s.ok()) return s;
  outstanding_ = batch;
  no_wait_ = no_wait;
  request_over_ = Clock::now() + std::chrono::milliseconds(no_wait ? 0 : expires_ms) + kLostRequestGrace;
  return {};
}

BusResult<std::vector<Message>> PullConsumer::fetch(int batch, std::int64_t timeout_ms) {
  std::vector<Message> out;
  if (conn_ == nullptr) return BusError{NATS_INVALID_SUBSCRIPTION, "pull consumer is not bound"};
  batch = std::max(batch, 1);
  timeout_ms = std::max<std::int64_t>(timeout_ms, 1);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  bool asked_for_available = false;
  while (static_cast<int>(out.size()) < batch) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    // NOTE: one request outstanding at a time; a new one only when the last is answered in full,
    // ended by a status (404, 408, 409) or presumed lost. Late messages of an earlier request still
    // arrive here and are returned by whichever fetch is running.
    if (outstanding_ <= 0 || now >= request_over_) {
      if (!out.empty()) break;  // the request that gave these is over: hand them on
      // NOTE: never while disconnected: nats.c would buffer the request and replay every buffered
      // one at reconnect, and the server would then deliver all of those batches at once.
      if (!conn_->connected()) return BusError{NATS_CONNECTION_DISCONNECTED, "pull request: not connected to NATS"};
      // First what the server has now (answered at once, with a 404 when short); if that is
      // nothing, a request that waits until messages come or the fetch's time is up.
      const bool no_wait = !asked_for_available;
      asked_for_available = true;
      if (auto s = send_request(batch, left, no_wait); !s.ok()) return s.error();
    }
    // NOTE: a no_wait request is read until it is answered in full; from a waiting request only the
    // first message is waited for, then what is already here is taken, so a trickle is handed on at
    // once (the rest of that request comes with the next fetch) while a backlog fills whole batches.
    const std::int64_t wait =
        out.empty() || no_wait_
            ? std::min<std::int64_t>(
                  left, std::chrono::duration_cast<std::chrono::milliseconds>(request_over_ - now).count() + 1)
            : 0;
    auto next = sub_.next(wait);
    if (!next.ok()) {
      if (next.error().timed_out()) {
        if (!out.empty() && !no_wait_) break;
        continue;  // loop: the deadline, or the request is presumed lost
      }
      if (out.empty()) return next.error();
      break;
    }
    Message msg = std::move(next).value();
    const auto status = status_of(msg);
    if (!status) {
      --outstanding_;
      out.push_back(std::move(msg));
      continue;
    }
    const std::string code = status->substr(0, 3);
    if (code == "100") continue;  // idle heartbeat (not requested, harmless)
    // 404 no messages, 408 request expired, 409 the request was cut short (max waiting, leadership
    // change, server shutdown, consumer deleted): this request is over either way.
    outstanding_ = 0;
    if (code == "404" || code == "408") continue;
    const std::string description = msg.header("Description").value_or("");
    if (code == "409" && description.find("Deleted") == std::string::npos) continue;
    BusError error{
        code == "503" ? NATS_NO_RESPONDERS : NATS_ERR,
        "pull request on " + next_subject_ + ": status " + code + (description.empty() ? "" : " " + description)};
    if (out.empty()) return error;
    break;
  }
  return out;
}

BusStatus jetstream_ack(Connection& conn, const Message& message) {
  if (message.reply().empty()) return BusError{NATS_ILLEGAL_STATE, "ack: the message has no JetStream reply subject"};
  return conn.publish(message.reply(), "+ACK");
}

BusStatus jetstream_ack_sync(Connection& conn, const Message& message, std::int64_t timeout_ms) {
  if (message.reply().empty()) return BusError{NATS_ILLEGAL_STATE, "ack: the message has no JetStream reply subject"};
  auto reply = conn.request(message.reply(), "+ACK", timeout_ms);
  if (!reply.ok()) return reply.error();
  return {};
}

}  // namespace kvidx::bus
