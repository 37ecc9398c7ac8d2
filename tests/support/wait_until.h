// Bounded polling for tests: every wait on another thread or process ends, passing or not.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace kvidx::testing {

// Polls `done` every `poll` until it returns true (-> true) or `limit` has passed (-> a last
// check's result).
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds limit = std::chrono::seconds(10),
                       std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

}  // namespace kvidx::testing
