#include "libindexer/tree/edge_coverage.h"

#include <algorithm>
#include <utility>

namespace kvidx {

EdgeCoverage::EdgeCoverage(EdgeCoverage&& other) noexcept
    : heap_(std::move(other.heap_)), size_(other.size_), capacity_(other.capacity_), inline_(other.inline_) {
  other.size_ = 0;
  other.capacity_ = kInlineCapacity;
}

EdgeCoverage& EdgeCoverage::operator=(EdgeCoverage&& other) noexcept {
  if (this != &other) {
    inline_ = other.inline_;
    heap_ = std::move(other.heap_);
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.size_ = 0;
    other.capacity_ = kInlineCapacity;
  }
  return *this;
}

std::uint32_t EdgeCoverage::lower_bound(WorkerSlot slot) const {
  const CoverageEntry* first = data();
  const CoverageEntry* it =
      std::lower_bound(first, first + size_, slot, [](const CoverageEntry& e, WorkerSlot s) { return e.slot < s; });
  return static_cast<std::uint32_t>(it - first);
}

std::uint32_t EdgeCoverage::covered(WorkerSlot slot) const {
  const std::uint32_t i = lower_bound(slot);
  return (i < size_ && data()[i].slot == slot) ? data()[i].covered : 0;
}

void EdgeCoverage::grow() {
  const std::uint32_t new_capacity = capacity_ * 2;
  auto bigger = std::make_unique<CoverageEntry[]>(new_capacity);
  std::copy(data(), data() + size_, bigger.get());
  heap_ = std::move(bigger);
  capacity_ = new_capacity;
}

void EdgeCoverage::push_back(CoverageEntry entry) {
  if (size_ == capacity_) grow();
  data()[size_++] = entry;
}

std::uint32_t EdgeCoverage::set(WorkerSlot slot, std::uint32_t count) {
  const std::uint32_t i = lower_bound(slot);
  CoverageEntry* d = data();
  if (i < size_ && d[i].slot == slot) {
    const std::uint32_t previous = d[i].covered;
    if (count > 0) {
      d[i].covered = count;
    } else {
      std::copy(d + i + 1, d + size_, d + i);
      --size_;
    }
    return previous;
  }
  if (count == 0) return 0;
  if (size_ == capacity_) {
    grow();
    d = data();
  }
  std::copy_backward(d + i, d + size_, d + size_ + 1);
  d[i] = CoverageEntry{slot, count};
  ++size_;
  return 0;
}

EdgeCoverage EdgeCoverage::split_off(std::uint32_t keep) {
  EdgeCoverage suffix;
  CoverageEntry* d = data();
  for (std::uint32_t i = 0; i < size_; ++i) {
    if (d[i].covered > keep) {
      suffix.push_back(CoverageEntry{d[i].slot, d[i].covered - keep});
      d[i].covered = keep;
    }
  }
  // keep > 0 always (a split never leaves an empty prefix), so no entry drops to zero here.
  return suffix;
}

}  // namespace kvidx
