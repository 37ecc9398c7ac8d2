#include "libbus/retrying_request.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "libbus/chunked_reply.h"

namespace kvidx::bus {

BusResult<RetriedReply> request_retrying(Connection& conn, std::string_view subject, std::string_view body,
                                         const RetryPolicy& policy) {
  using Clock = std::chrono::steady_clock;
  const int attempts = std::max(0, policy.retries) + 1;
  const auto deadline = Clock::now() + std::chrono::milliseconds(policy.timeout_ms);
  const std::int64_t per_attempt = std::max<std::int64_t>(1, policy.timeout_ms / attempts);
  BusError last{NATS_TIMEOUT, "no attempt made"};
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    // NOTE: the last attempt may use whatever an early no-responders answer left of the deadline.
    const std::int64_t wait = attempt == attempts ? left : std::min<std::int64_t>(per_attempt, left);
    auto reply = request_accepting_chunks(conn, subject, body, wait);
    if (reply.ok()) return RetriedReply{std::move(reply).value(), attempt};
    last = reply.error();
    if (last.status != NATS_NO_RESPONDERS && !last.timed_out()) break;  // not a missing replica
    if (last.status == NATS_NO_RESPONDERS && attempt < attempts) {
      std::this_thread::sleep_until(
          std::min(deadline, Clock::now() + std::chrono::milliseconds(policy.no_responders_pause_ms)));
    }
  }
  return last;
}

}  // namespace kvidx::bus
