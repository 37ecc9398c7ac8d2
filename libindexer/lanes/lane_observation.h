// Bench observation of the lanes: value types for timing each event from the moment a producer
// hands it over (accepted) to the moment its lane has applied it (applied), without allocating on
// the lanes. The session flow lives on LaneIndexer (begin_observation ... harvest).
//
// Times are nanoseconds since the plan's epoch (steady clock). Each lane writes only its own
// buffer, and only between the install and harvest barriers of one observation; the producer
// reads buffers only after harvest, so no buffer is ever shared while it is written.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx {

using LaneId = std::size_t;

// How many events each stream will send, so every lane gets one buffer sized for its streams.
struct ObservationPlan {
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
  std::vector<std::pair<WorkerWithDpRank, std::size_t>> expected_events_by_stream;
};

enum class ObservationError : std::uint8_t {
  empty_plan,         // the plan names no stream
  already_active,     // another observation holds the indexer
  duplicate_stream,   // a stream appears twice in the plan
  capacity_overflow,  // a lane's expected event count does not fit in size_t
  producers_closed,   // enqueue after the observation ended
  unknown_stream,     // the event's stream was not in the plan
  offline,            // a lane failed or the indexer shut down
};

std::string_view to_string(ObservationError error);

struct ObservedReceipt {
  LaneId lane = 0;
  std::uint64_t accepted_ns = 0;  // taken before the event was queued, so applied_ns >= accepted_ns
};

struct ObservedRecord {
  std::uint32_t correlation_id = 0;
  std::uint64_t accepted_ns = 0;
  std::uint64_t applied_ns = 0;

  friend bool operator==(const ObservedRecord&, const ObservedRecord&) = default;
};

// Fixed-capacity record buffer of one lane. Records past the capacity are counted, not stored.
class LaneObservationBuffer {
 public:
  LaneObservationBuffer() = default;
  LaneObservationBuffer(LaneId lane, std::size_t capacity) : lane_(lane), capacity_(capacity) {
    records_.reserve(capacity);
  }

  // Lane-thread side; never allocates.
  void record(const ObservedRecord& record) noexcept {
    if (records_.size() < capacity_) {
      records_.push_back(record);
    } else {
      ++dropped_;
    }
  }

  LaneId lane() const { return lane_; }
  std::span<const ObservedRecord> records() const { return records_; }
  std::size_t capacity() const { return capacity_; }
  bool overflowed() const { return dropped_ > 0; }
  std::uint64_t dropped() const { return dropped_; }

 private:
  LaneId lane_ = 0;
  std::size_t capacity_ = 0;
  std::vector<ObservedRecord> records_;
  std::uint64_t dropped_ = 0;
};

struct ObservationSeal {
  LaneId lane = 0;
  std::uint64_t sealed_ns = 0;  // when the lane reached the seal barrier
};

struct ObservationSnapshot {
  std::vector<ObservationSeal> seals;              // one per lane, by lane id
  std::vector<LaneObservationBuffer> buffers;      // one per lane, by lane id
  std::vector<std::size_t> queue_depth_at_stop;    // tasks waiting per lane when producers closed

  std::uint64_t latest_seal_ns() const;
};

// State one observation shares between its session and the lane threads (see the file comment
// for who writes what when).
struct ObservationRun {
  std::chrono::steady_clock::time_point epoch;
  std::vector<LaneObservationBuffer> buffers;    // [lane]
  std::vector<std::uint64_t> sealed_ns;          // [lane], written by the lane at the seal barrier
  std::vector<std::size_t> queue_depth_at_stop;  // written by the producer when it closes

  std::uint64_t elapsed_ns() const {
    const auto elapsed = std::chrono::steady_clock::now() - epoch;
    return elapsed.count() < 0 ? 0 : static_cast<std::uint64_t>(
                                         std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  }
};

// A value or the ObservationError that prevented it.
template <class T>
class ObservationOutcome {
 public:
  ObservationOutcome(T value) : state_(std::move(value)) {}                // NOLINT(google-explicit-constructor)
  ObservationOutcome(ObservationError error) : state_(error) {}            // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }
  // Throw std::bad_variant_access when called on the other alternative.
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  ObservationError error() const { return std::get<ObservationError>(state_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, ObservationError> state_;
};

}  // namespace kvidx
