// NodeLock: the reader-writer lock of one tree node, in one 32-bit word (std::shared_mutex is 56
// bytes and filled a node's first cache line on its own). It meets the standard Lockable and
// SharedLockable requirements, so std::unique_lock and std::shared_lock work with it.
//
// Writers are preferred: once a writer waits, new shared lockers wait too, so a stream of readers
// taking a node hand over hand never holds a lane off it for long (glibc's rwlock prefers readers).
// That makes a shared lock taken twice by one thread a deadlock when a writer arrives in between;
// the tree never does that (its locking rules in radix_tree.h: each thread locks ancestor before
// descendant, never a node it holds).
//
// Waiting spins briefly, then sleeps on the word (std::atomic::wait, a futex on Linux). Under
// ThreadSanitizer the lock announces itself as a mutex, so lock-order checks still cover the tree.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__SANITIZE_THREAD__)
#define KVIDX_NODE_LOCK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVIDX_NODE_LOCK_TSAN 1
#endif
#endif
#if defined(KVIDX_NODE_LOCK_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace kvidx {

class NodeLock {
 public:
  NodeLock() noexcept { announce_create(); }
  NodeLock(const NodeLock&) = delete;
  NodeLock& operator=(const NodeLock&) = delete;
  ~NodeLock() { announce_destroy(); }

  void lock() noexcept {
    announce_pre_lock(0);
    std::uint32_t free = 0;
    if (!state_.compare_exchange_strong(free, kWriter, std::memory_order_acquire, std::memory_order_relaxed)) {
      lock_slow();
    }
    announce_post_lock(0);
  }
  bool try_lock() noexcept {
    announce_pre_lock(kTryFlag);
    std::uint32_t free = 0;
    const bool taken =
        state_.compare_exchange_strong(free, kWriter, std::memory_order_acquire, std::memory_order_relaxed);
    announce_post_lock(taken ? kTryFlag : kTryFlag | kFailedFlag);
    return taken;
  }
  void unlock() noexcept {
    announce_pre_unlock(0);
    // Clearing kSleepers here is safe: every sleeper re-checks the word when woken and sets it again.
    const std::uint32_t before = state_.fetch_and(~(kWriter | kSleepers), std::memory_order_release);
    if ((before & kSleepers) != 0) state_.notify_all();
    announce_post_unlock(0);
  }

  void lock_shared() noexcept {
    announce_pre_lock(kReadFlag);
    std::uint32_t seen = state_.load(std::memory_order_relaxed);
    if ((seen & kHoldsOffReaders) != 0 ||
        !state_.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      lock_shared_slow();
    }
    announce_post_lock(kReadFlag);
  }
  bool try_lock_shared() noexcept {
    announce_pre_lock(kReadFlag | kTryFlag);
    std::uint32_t seen = state_.load(std::memory_order_relaxed);
    bool taken = false;
    while ((seen & kHoldsOffReaders) == 0 && !taken) {
      taken = state_.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire, std::memory_order_relaxed);
    }
    announce_post_lock(taken ? kReadFlag | kTryFlag : kReadFlag | kTryFlag | kFailedFlag);
    return taken;
  }
  void unlock_shared() noexcept {
    announce_pre_unlock(kReadFlag);
    const std::uint32_t before = state_.fetch_sub(1, std::memory_order_release);
    // Only writers wait for readers to leave, so only the last reader out wakes anyone.
    if ((before & kReaderMask) == 1 && (before & kSleepers) != 0) {
      state_.fetch_and(~kSleepers, std::memory_order_relaxed);
      state_.notify_all();
    }
    announce_post_unlock(kReadFlag);
  }

 private:
  // The word: readers holding it (bits 0-15), writers waiting (bits 16-29), somebody asleep on the
  // word (bit 30: the next release must notify), a writer holding it (bit 31).
  static constexpr std::uint32_t kReaderMask = 0xffffU;
  static constexpr std::uint32_t kWaitingWriter = 1U << 16;
  static constexpr std::uint32_t kWaitingWriterMask = 0x3fffU << 16;
  static constexpr std::uint32_t kSleepers = 1U << 30;
  static constexpr std::uint32_t kWriter = 1U << 31;
  static constexpr std::uint32_t kHoldsOffReaders = kWriter | kWaitingWriterMask;
  static constexpr int kSpins = 64;  // pauses before sleeping: critical sections are short

  void lock_slow() noexcept;
  void lock_shared_slow() noexcept;
  // Replaces the word `seen` with take(seen) once none of `blockers` is set in it; spins a little,
  // then sleeps.
  template <typename Take>
  void acquire_when_clear(std::uint32_t blockers, Take take) noexcept;
  // Sleeps until the word changes from `seen`, first marking it so the next release notifies.
  void sleep_on(std::uint32_t seen) noexcept;

#if defined(KVIDX_NODE_LOCK_TSAN)
  static constexpr unsigned kReadFlag = __tsan_mutex_read_lock;
  static constexpr unsigned kTryFlag = __tsan_mutex_try_lock;
  static constexpr unsigned kFailedFlag = __tsan_mutex_try_lock_failed;
  void announce_create() noexcept { __tsan_mutex_create(this, __tsan_mutex_not_static); }
  void announce_destroy() noexcept { __tsan_mutex_destroy(this, __tsan_mutex_not_static); }
  void announce_pre_lock(unsigned flags) noexcept { __tsan_mutex_pre_lock(this, flags); }
  void announce_post_lock(unsigned flags) noexcept { __tsan_mutex_post_lock(this, flags, 0); }
  void announce_pre_unlock(unsigned flags) noexcept { __tsan_mutex_pre_unlock(this, flags); }
  void announce_post_unlock(unsigned flags) noexcept { __tsan_mutex_post_unlock(this, flags); }
#else
  static constexpr unsigned kReadFlag = 1;
  static constexpr unsigned kTryFlag = 2;
  static constexpr unsigned kFailedFlag = 4;
  void announce_create() noexcept {}
  void announce_destroy() noexcept {}
  void announce_pre_lock(unsigned /*flags*/) noexcept {}
  void announce_post_lock(unsigned /*flags*/) noexcept {}
  void announce_pre_unlock(unsigned /*flags*/) noexcept {}
  void announce_post_unlock(unsigned /*flags*/) noexcept {}
#endif

  std::atomic<std::uint32_t> state_{0};
};

}  // namespace kvidx
