#include "libbus/log_rate_limiter.h"

#include <fmt/format.h>

namespace kvidx::bus {

LogRateLimiter::Verdict LogRateLimiter::admit(std::string_view kind, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  auto it = kinds_.find(kind);
  if (it == kinds_.end()) {
    kinds_.emplace(std::string(kind), KindState{now, 0});
    return Verdict{true, 0};
  }
  KindState& state = it->second;
  if (now - state.last_logged < interval_) {
    ++state.suppressed;
    return Verdict{false, 0};
  }
  const Verdict verdict{true, state.suppressed};
  state.last_logged = now;
  state.suppressed = 0;
  return verdict;
}

std::vector<std::pair<std::string, std::uint64_t>> LogRateLimiter::take_suppressed() {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (auto& [kind, state] : kinds_) {
    if (state.suppressed == 0) continue;
    out.emplace_back(kind, state.suppressed);
    state.suppressed = 0;
  }
  return out;
}

std::string suppressed_note(const LogRateLimiter::Verdict& verdict) {
  if (verdict.suppressed == 0) return {};
  return fmt::format(" ({} more not logged since the previous such line)", verdict.suppressed);
}

}  // namespace kvidx::bus
