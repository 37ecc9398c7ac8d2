// LogRateLimiter (libbus/log_rate_limiter.h): the first occurrence of a kind is logged, then one
// line per interval per kind carrying the count of those not logged; nothing is lost from the count.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "libbus/log_rate_limiter.h"

using kvidx::bus::LogRateLimiter;
using namespace std::chrono_literals;

TEST_CASE("log rate limiter: first occurrence logged, then one line per interval per kind with the suppressed count") {
  LogRateLimiter limiter(10s);
  const auto t0 = LogRateLimiter::Clock::time_point{} + 1h;
  CHECK(limiter.admit("dead_letter", t0).log);
  int logged = 0;
  for (int i = 1; i <= 9999; ++i) logged += limiter.admit("dead_letter", t0 + i * 1ms).log ? 1 : 0;
  CHECK(logged == 0);  // 10,000 occurrences within 10 s: one line
  // Another kind has its own budget.
  CHECK(limiter.admit("query_rejected", t0 + 1s).log);
  // After the interval: one line that says how many were not logged.
  const auto later = limiter.admit("dead_letter", t0 + 10s);
  CHECK(later.log);
  CHECK(later.suppressed == 9999);
  CHECK(kvidx::bus::suppressed_note(later) == " (9999 more not logged since the previous such line)");
  CHECK(kvidx::bus::suppressed_note(LogRateLimiter::Verdict{true, 0}).empty());
  CHECK_FALSE(limiter.admit("dead_letter", t0 + 11s).log);
  CHECK_FALSE(limiter.admit("dead_letter", t0 + 12s).log);
  CHECK_FALSE(limiter.admit("query_rejected", t0 + 2s).log);
  // Shutdown summary: what is still unreported, per kind; then nothing.
  const auto pending = limiter.take_suppressed();
  REQUIRE(pending.size() == 2);
  CHECK(pending[0] == std::pair<std::string, std::uint64_t>{"dead_letter", 2});
  CHECK(pending[1] == std::pair<std::string, std::uint64_t>{"query_rejected", 1});
  CHECK(limiter.take_suppressed().empty());
}

TEST_CASE("log rate limiter: concurrent callers together get one line per interval and lose no count") {
  LogRateLimiter limiter(1h);
  std::atomic<int> logged{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2500; ++i) logged += limiter.admit("dead_letter").log ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(logged == 1);
  const auto pending = limiter.take_suppressed();
  REQUIRE(pending.size() == 1);
  CHECK(pending[0].second == 9999);
}
