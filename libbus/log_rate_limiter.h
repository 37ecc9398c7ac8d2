// Bounds how often one kind of warning reaches the log while the counters beside it stay exact:
// 10,000 malformed messages must not make 10,000 log lines. Per kind (a fixed label chosen by the
// caller, never text from the input): the first occurrence is logged, then at most one line per
// `interval`, which also says how many occurrences were not logged since the previous line.
// Thread-safe (dead letters come from the dispatch and the core delivery threads, rejected
// queries from the responders); called on rejection paths only, so one mutex is enough.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvidx::bus {

class LogRateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogRateLimiter(Clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  struct Verdict {
    bool log = false;              // write this occurrence's line
    std::uint64_t suppressed = 0;  // with log: occurrences of this kind not logged since its previous line
  };
  Verdict admit(std::string_view kind, Clock::time_point now = Clock::now());

  // Kinds with occurrences not logged since their last line, with those counts, sorted by kind;
  // resets them (for a closing summary at shutdown).
  std::vector<std::pair<std::string, std::uint64_t>> take_suppressed();

 private:
  struct KindState {
    Clock::time_point last_logged;
    std::uint64_t suppressed = 0;
  };
  const Clock::duration interval_;
  std::mutex mutex_;
  std::map<std::string, KindState, std::less<>> kinds_;
};

// " (N more not logged since the previous such line)" for a Verdict with suppressed occurrences,
// empty otherwise: appended to the line that is logged.
std::string suppressed_note(const LogRateLimiter::Verdict& verdict);

}  // namespace kvidx::bus
