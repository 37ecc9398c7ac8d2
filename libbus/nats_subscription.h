// Owning wrapper for a natsSubscription. Async subscriptions own their handler; the destructor
// unsubscribes and waits (natsSubscription_SetOnCompleteCB) until the handler has returned for the
// last time, so the handler's captures may be freed right after. Sync subscriptions are polled
// with next(); JetStream pull consumers are read with PullConsumer (nats_pull_consumer.h).
// NOTE: the Connection must outlive its Subscriptions, and a handler must never destroy the
// Subscription it runs in (the destructor would wait for itself).
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "libbus/nats_error.h"
#include "libbus/nats_message.h"

namespace kvidx::bus {

using MessageHandler = std::function<void(Message)>;

class Subscription {
 public:
  Subscription() = default;
  Subscription(Subscription&& other) noexcept;
  Subscription& operator=(Subscription&& other) noexcept;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  ~Subscription();

  bool valid() const { return sub_ != nullptr; }

  // Removes the client's pending limits (count and bytes), so bursts queue instead of dropping.
  BusStatus set_unlimited_pending();
  BusStatus set_pending_limits(int msgs, int bytes);
  // Messages the client dropped because the pending limits were exceeded (slow consumer).
  std::int64_t dropped() const;
  // Messages received but not yet delivered to the handler.
  int pending() const;

  // Sync subscriptions: the next message, or an error (timed_out() when none came in time).
  BusResult<Message> next(std::int64_t timeout_ms);

  // Stops delivery and waits for the handler to finish (also done by the destructor).
  void close();

  natsSubscription* raw() const { return sub_; }

 private:
  friend class Connection;
  struct HandlerState;

  static BusResult<Subscription> make_async(natsConnection* nc, std::string_view subject, std::string_view queue,
                                            MessageHandler handler);
  static void on_message(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);
  static void on_complete(void* closure);

  natsSubscription* sub_ = nullptr;
  std::shared_ptr<HandlerState> state_;  // async only; also referenced by nats.c until completion
};

}  // namespace kvidx::bus
