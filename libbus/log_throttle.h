// At most one log line per interval for a failure that can repeat at a high rate (reply publishes,
// HTTP accept errors): the first occurrence is logged at once, the next ones are counted and the
// count is reported with the next line allowed. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvidx::bus {

class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::milliseconds interval) : interval_ns_(interval.count() * 1'000'000) {}

  // True when a line may be written now; `suppressed` is then set to how many occurrences were
  // not logged since the last line.
  bool allow(std::uint64_t& suppressed) {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    std::int64_t next = next_ns_.load(std::memory_order_relaxed);
    // NOTE: one thread wins the exchange per interval; the others count themselves as suppressed.
    if (now >= next && next_ns_.compare_exchange_strong(next, now + interval_ns_, std::memory_order_relaxed)) {
      suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
      return true;
    }
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

 private:
  std::int64_t interval_ns_;
  std::atomic<std::int64_t> next_ns_{0};
  std::atomic<std::uint64_t> suppressed_{0};
};

}  // namespace kvidx::bus
