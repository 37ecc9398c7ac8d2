#include "libbus/nats_subscription.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>

namespace kvidx::bus {

struct Subscription::HandlerState {
  MessageHandler handler;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  // NOTE: nats.c holds a raw pointer to this state until on_complete runs; `self` keeps it alive
  // that long even if the Subscription gave up waiting.
  std::shared_ptr<HandlerState> self;
};

void Subscription::on_message(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* state = static_cast<HandlerState*>(closure);
  Message owned(msg);
  try {
    state->handler(std::move(owned));
  } catch (const std::exception& e) {
    spdlog::error("subscription handler threw: {}", e.what());
  } catch (...) {
    spdlog::error("subscription handler threw a non-exception");
  }
}

void Subscription::on_complete(void* closure) {
  auto* state = static_cast<HandlerState*>(closure);
  std::shared_ptr<HandlerState> keep;
  {
    std::lock_guard lock(state->mutex);
    state->done = true;
    keep = std::move(state->self);
  }
  state->done_cv.notify_all();
}

BusResult<Subscription> Subscription::make_async(natsConnection* nc, std::string_view subject, std::string_view queue,
                                                 MessageHandler handler) {
  const std::string subj(subject);
  const std::string group(queue);
  Subscription sub;
  sub.state_ = std::make_shared<HandlerState>();
  sub.state_->handler = std::move(handler);
  natsStatus s = group.empty() ? natsConnection_Subscribe(&sub.sub_, nc, subj.c_str(), &on_message, sub.state_.get())
                               : natsConnection_QueueSubscribe(&sub.sub_, nc, subj.c_str(), group.c_str(), &on_message,
                                                               sub.state_.get());
  if (s != NATS_OK) {
    sub.state_.reset();
    return nats_error(s, "subscribe to " + subj);
  }
  sub.state_->self = sub.state_;
  s = natsSubscription_SetOnCompleteCB(sub.sub_, &on_complete, sub.state_.get());
  if (s != NATS_OK) {
    BusError error = nats_error(s, "natsSubscription_SetOnCompleteCB");
    sub.state_->self.reset();
    sub.state_->done = true;  // no completion callback will come; do not wait for one
    return error;
  }
  return sub;
}

Subscription::Subscription(Subscription&& other) noexcept
    : sub_(std::exchange(other.sub_, nullptr)), state_(std::move(other.state_)) {}

Subscription& Subscription::operator=(Subscription&& other) noexcept {
  if (this != &other) {
    close();
    sub_ = std::exchange(other.sub_, nullptr);
    state_ = std::move(other.state_);
  }
  return *this;
}

Subscription::~Subscription() { close(); }

void Subscription::close() {
  if (sub_ == nullptr) return;
  if (state_) {
    natsSubscription_Unsubscribe(sub_);
    std::unique_lock lock(state_->mutex);
    if (!state_->done_cv.wait_for(lock, std::chrono::seconds(10), [&] { return state_->done; })) {
      spdlog::warn("subscription handler did not complete within 10 s of unsubscribe");
    }
  } else {
    natsSubscription_Unsubscribe(sub_);
  }
  natsSubscription_Destroy(sub_);
  sub_ = nullptr;
  state_.reset();
}

BusStatus Subscription::set_unlimited_pending() { return set_pending_limits(-1, -1); }

BusStatus Subscription::set_pending_limits(int msgs, int bytes) {
  natsStatus s = natsSubscription_SetPendingLimits(sub_, msgs, bytes);
  if (s != NATS_OK) return nats_error(s, "natsSubscription_SetPendingLimits");
  return {};
}

std::int64_t Subscription::dropped() const {
  int64_t n = 0;
  if (sub_ == nullptr || natsSubscription_GetDropped(sub_, &n) != NATS_OK) return 0;
  return n;
}

int Subscription::pending() const {
  int msgs = 0;
  int bytes = 0;
  if (sub_ == nullptr || natsSubscription_GetPending(sub_, &msgs, &bytes) != NATS_OK) return 0;
  return msgs;
}

BusResult<Message> Subscription::next(std::int64_t timeout_ms) {
  natsMsg* msg = nullptr;
  natsStatus s = natsSubscription_NextMsg(&msg, sub_, timeout_ms);
  if (s != NATS_OK) return nats_error(s, "natsSubscription_NextMsg");
  return Message(msg);
}

}  // namespace kvidx::bus
