// NodeLock (libindexer/tree/node_lock.h): writers exclude everyone, readers share, a waiting writer
// holds off new readers, and nobody sleeps through a release. Threads record who is inside with
// atomics, so an exclusion failure is seen directly instead of through a lost update.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "libindexer/tree/node_lock.h"

using namespace kvidx;
using namespace std::chrono_literals;

namespace {

// Polls `done` for up to 10 s (a generous bound for a loaded CI box).
template <typename Predicate>
bool eventually(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("node lock: readers share it, a writer excludes readers and writers") {
  NodeLock lock;
  lock.lock_shared();
  CHECK(lock.try_lock_shared());  // a second reader (another thread's, in the tree)
  CHECK_FALSE(lock.try_lock());
  lock.unlock_shared();
  lock.unlock_shared();

  CHECK(lock.try_lock());
  CHECK_FALSE(lock.try_lock());
  CHECK_FALSE(lock.try_lock_shared());
  lock.unlock();
  CHECK(lock.try_lock_shared());
  lock.unlock_shared();
}

TEST_CASE("node lock: a waiting writer holds off new readers, and gets the lock when the old ones leave") {
  NodeLock lock;
  lock.lock_shared();
  std::atomic<bool> writer_in{false};
  std::thread writer([&] {
    std::unique_lock exclusive(lock);
    writer_in.store(true);
  });
  // Once the writer waits, a new reader is refused although only readers hold the lock.
  CHECK(eventually([&] {
    if (!lock.try_lock_shared()) return true;
    lock.unlock_shared();
    return false;
  }));
  std::this_thread::sleep_for(20ms);  // long enough for the writer to fall asleep on the word
  CHECK_FALSE(writer_in.load());
  lock.unlock_shared();
  CHECK(eventually([&] { return writer_in.load(); }));
  writer.join();
  CHECK(lock.try_lock());
  lock.unlock();
}

TEST_CASE("node lock: sleeping readers wake when the writer releases") {
  NodeLock lock;
  lock.lock();
  std::atomic<int> readers_in{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      std::shared_lock shared(lock);
      readers_in.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(20ms);
  CHECK(readers_in.load() == 0);
  lock.unlock();
  CHECK(eventually([&] { return readers_in.load() == 3; }));
  for (auto& reader : readers) reader.join();
}

TEST_CASE("node lock: under contention no reader meets a writer and no two writers meet") {
  NodeLock lock;
  std::atomic<int> writers_inside{0};
  std::atomic<int> readers_inside{0};
  std::atomic<int> violations{0};
  std::atomic<long> writes{0};
  std::atomic<long> reads{0};
  constexpr int kRounds = 20'000;
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::unique_lock exclusive(lock);
        if (writers_inside.fetch_add(1) != 0 || readers_inside.load() != 0) violations.fetch_add(1);
        writes.fetch_add(1);
        writers_inside.fetch_sub(1);
      }
    });
  }
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::shared_lock shared(lock);
        readers_inside.fetch_add(1);
        if (writers_inside.load() != 0) violations.fetch_add(1);
        reads.fetch_add(1);
        readers_inside.fetch_sub(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(violations.load() == 0);
  CHECK(writes.load() == 2L * kRounds);
  CHECK(reads.load() == 3L * kRounds);
  // Everyone left: the word is free again.
  CHECK(lock.try_lock());
  lock.unlock();
}

TEST_CASE("node lock: with long holds every waiter falls asleep and is woken, none is left behind") {
  // Holds of ~100 µs outlast the spin, so both kinds of waiter sleep on the word at every round; a
  // missed wake-up would leave a thread asleep and the joins below would never return.
  NodeLock lock;
  std::atomic<int> writers_inside{0};
  std::atomic<int> violations{0};
  std::atomic<int> done{0};
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::unique_lock exclusive(lock);
        if (writers_inside.fetch_add(1) != 0) violations.fetch_add(1);
        std::this_thread::sleep_for(100us);
        writers_inside.fetch_sub(1);
      }
      done.fetch_add(1);
    });
  }
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::shared_lock shared(lock);
        if (writers_inside.load() != 0) violations.fetch_add(1);
        std::this_thread::sleep_for(50us);
      }
      done.fetch_add(1);
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(done.load() == 6);
  CHECK(violations.load() == 0);
  CHECK(lock.try_lock());
  lock.unlock();
}
