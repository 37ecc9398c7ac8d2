#include "libindexer/tree/node_lock.h"

namespace kvidx {
namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

template <typename Take>
void NodeLock::acquire_when_clear(std::uint32_t blockers, Take take) noexcept {
  for (int spins = 0;;) {
    std::uint32_t seen = state_.load(std::memory_order_relaxed);
    if ((seen & blockers) == 0) {
      if (state_.compare_exchange_weak(seen, take(seen), std::memory_order_acquire, std::memory_order_relaxed)) return;
      continue;
    }
    if (spins < kSpins) {
      ++spins;
      cpu_relax();
      continue;
    }
    sleep_on(seen);
  }
}

void NodeLock::lock_slow() noexcept {
  // NOTE: announced before waiting, so readers arriving from now on queue behind this writer.
  state_.fetch_add(kWaitingWriter, std::memory_order_relaxed);
  acquire_when_clear(kWriter | kReaderMask, [](std::uint32_t seen) { return (seen - kWaitingWriter) | kWriter; });
}

void NodeLock::lock_shared_slow() noexcept {
  acquire_when_clear(kHoldsOffReaders, [](std::uint32_t seen) { return seen + 1; });
}

void NodeLock::sleep_on(std::uint32_t seen) noexcept {
  // NOTE: the mark and the sleep use the same value: if a release changes the word in between, the
  // wait returns at once instead of missing the wake-up.
  if ((seen & kSleepers) == 0 &&
      !state_.compare_exchange_strong(seen, seen | kSleepers, std::memory_order_relaxed, std::memory_order_relaxed)) {
    return;  // the word moved on: the caller looks again
  }
  state_.wait(seen | kSleepers, std::memory_order_relaxed);
}

}  // namespace kvidx
