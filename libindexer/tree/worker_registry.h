// WorkerRegistry: gives every (worker, rank) stream a dense WorkerSlot the first time the tree sees
// it, and keeps that stream's held-block count. Slots are never reused, so a slot read from a
// node's coverage always names the same stream. Readers map slots back to streams and counts
// without locking: slot records live in fixed-size chunks that never move once published.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "libindexer/protocol.h"
#include "libindexer/tree/cache_prefetch.h"
#include "libindexer/tree/edge_coverage.h"

namespace kvidx {

class WorkerRegistry {
 public:
  WorkerRegistry() = default;
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;
  ~WorkerRegistry();

  // The stream's slot, created on first use; nullopt once kMaxSlots streams exist.
  std::optional<WorkerSlot> slot_for(WorkerWithDpRank stream);
  std::optional<WorkerSlot> find(WorkerWithDpRank stream) const;

  // NOTE: valid only for slots obtained from this registry (a coverage entry or slot_for).
  WorkerWithDpRank stream_of(WorkerSlot slot) const { return record(slot).stream; }
  std::int64_t block_count(WorkerSlot slot) const { return record(slot).blocks.load(std::memory_order_relaxed); }
  // Both of a slot's figures from one record lookup (a query's result reads them for every holder).
  // NOTE: the stream's fields one by one: a WorkerWithDpRank copied whole went through the stack.
  struct SlotView {
    WorkerId worker_id = 0;
    DpRank dp_rank = 0;
    std::int64_t blocks = 0;
  };
  SlotView view(WorkerSlot slot) const {
    const SlotRecord& r = record(slot);
    return SlotView{r.stream.worker_id, r.stream.dp_rank, r.blocks.load(std::memory_order_relaxed)};
  }
  // Starts loading the slot's record (a hint; see cache_prefetch.h).
  void prefetch(WorkerSlot slot) const { prefetch_line(&record(slot)); }
  void add_blocks(WorkerSlot slot, std::int64_t delta) {
    record(slot).blocks.fetch_add(delta, std::memory_order_relaxed);
  }

  std::uint32_t slot_count() const { return next_slot_.load(std::memory_order_acquire); }
  std::vector<WorkerSlot> slots_of_worker(WorkerId worker_id) const;

  static constexpr std::uint32_t kChunkBits = 10;
  static constexpr std::uint32_t kChunkSize = 1u << kChunkBits;
  static constexpr std::uint32_t kMaxChunks = 4096;
  static constexpr std::uint32_t kMaxSlots = kChunkSize * kMaxChunks;

 private:
  struct SlotRecord {
    WorkerWithDpRank stream;
    std::atomic<std::int64_t> blocks{0};
  };
  struct Chunk {
    std::array<SlotRecord, kChunkSize> records;
  };

  SlotRecord& record(WorkerSlot slot) const {
    return chunks_[slot >> kChunkBits].load(std::memory_order_acquire)->records[slot & (kChunkSize - 1)];
  }

  mutable std::shared_mutex mutex_;
  std::unordered_map<WorkerWithDpRank, WorkerSlot, WorkerWithDpRankHasher> slots_;  // guarded by mutex_
  std::array<std::atomic<Chunk*>, kMaxChunks> chunks_{};                            // owned; written under mutex_
  std::atomic<std::uint32_t> next_slot_{0};
};

}  // namespace kvidx
