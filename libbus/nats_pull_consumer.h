// PullConsumer: reads an existing durable JetStream pull consumer. Pull requests are sent by hand
// ($JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>, {"batch","expires"}) to a plain inbox
// subscription, and messages are taken one at a time into a growing vector.
//
// NOTE: why not natsSubscription_Fetch: libnats 3.4.1 (Debian 12) sizes its result array for the
// batch, takes messages already queued from an earlier pull request first, then shrinks the
// request to (batch - taken) but loops until the count equals that *shrunk* number. When more
// than half a batch was already queued (a fetch that timed out with part of a batch, the rest
// arriving later: typical while draining a backlog across server restarts) it writes past the
// array: heap corruption. Fixed upstream in nats.c #749 (2024), not in 3.4.1.
//
// Acknowledgements are published by hand as well ("+ACK" to the message's $JS.ACK reply subject):
// nats.c's natsMsg_Ack needs a JetStream subscription behind the message.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"
#include "libbus/nats_message.h"
#include "libbus/nats_subscription.h"

namespace kvidx::bus {

class PullConsumer {
 public:
  PullConsumer() = default;
  PullConsumer(PullConsumer&&) noexcept = default;
  PullConsumer& operator=(PullConsumer&&) noexcept = default;

  // Binds to the durable `durable` of `stream` (it must exist: JetStream::ensure_consumer). Only
  // subscribes to a fresh inbox; nothing is requested until the first fetch. `conn` must outlive it.
  static BusResult<PullConsumer> bind(Connection& conn, std::string_view stream, std::string_view durable);

  // Up to `batch` messages in delivery order: what the server has now (a no_wait request), or when
  // that is nothing, the first messages to come within `timeout_ms` and those right behind them
  // (the semantics of nats.c's simple fetch, without its wait for a full batch); empty when none came.
  // Messages of an earlier request that arrive late are returned by a later fetch, never dropped.
  // Errors: not connected (NATS_CONNECTION_DISCONNECTED: nothing was requested), or the server
  // answered the pull request with an error status (409 consumer deleted; NATS_NO_RESPONDERS: the
  // durable, the stream or JetStream itself is not there).
  BusResult<std::vector<Message>> fetch(int batch, std::int64_t timeout_ms);

  // Messages requested from the server and not received yet (0: no request outstanding).
  int outstanding() const { return outstanding_; }

 private:
  BusStatus send_request(int batch, std::int64_t expires_ms, bool no_wait);

  Connection* conn_ = nullptr;
  std::string next_subject_;  // $JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>
  std::string inbox_;
  Subscription sub_;
  int outstanding_ = 0;
  bool no_wait_ = false;  // the outstanding request is a no_wait one (answered at once)
  // When the outstanding request is over for sure, by the client's clock: the server may have lost
  // it (a restart) without answering, so after this a new one is sent regardless.
  std::chrono::steady_clock::time_point request_over_{};
};

// "+ACK" for a message delivered by a pull consumer (for an AckAll consumer, it acknowledges every
// message before it too). `ack` does not wait; `ack_sync` waits for the server's confirmation.
BusStatus jetstream_ack(Connection& conn, const Message& message);
BusStatus jetstream_ack_sync(Connection& conn, const Message& message, std::int64_t timeout_ms);

}  // namespace kvidx::bus
