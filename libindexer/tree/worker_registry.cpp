#include "libindexer/tree/worker_registry.h"

namespace kvidx {

WorkerRegistry::~WorkerRegistry() {
  for (auto& chunk : chunks_) delete chunk.load(std::memory_order_relaxed);
}

std::optional<WorkerSlot> WorkerRegistry::find(WorkerWithDpRank stream) const {
  std::shared_lock lock(mutex_);
  if (auto it = slots_.find(stream); it != slots_.end()) return it->second;
  return std::nullopt;
}

std::optional<WorkerSlot> WorkerRegistry::slot_for(WorkerWithDpRank stream) {
  if (auto found = find(stream)) return found;
  std::unique_lock lock(mutex_);
  if (auto it = slots_.find(stream); it != slots_.end()) return it->second;
  const WorkerSlot slot = next_slot_.load(std::memory_order_relaxed);
  if (slot >= kMaxSlots) return std::nullopt;
  auto& chunk = chunks_[slot >> kChunkBits];
  if (chunk.load(std::memory_order_relaxed) == nullptr) chunk.store(new Chunk, std::memory_order_release);
  chunk.load(std::memory_order_relaxed)->records[slot & (kChunkSize - 1)].stream = stream;
  slots_.emplace(stream, slot);
  // NOTE: published after the record is written, so a reader that sees the count sees the stream.
  next_slot_.store(slot + 1, std::memory_order_release);
  return slot;
}

std::vector<WorkerSlot> WorkerRegistry::slots_of_worker(WorkerId worker_id) const {
  std::vector<WorkerSlot> out;
  std::shared_lock lock(mutex_);
  for (const auto& [stream, slot] : slots_) {
    if (stream.worker_id == worker_id) out.push_back(slot);
  }
  return out;
}

}  // namespace kvidx
