#include "libindexer/intake/stream_sequencer.h"

#include <algorithm>

namespace kvidx {

SequenceDecision StreamSequencer::observe(WorkerWithDpRank stream, std::uint64_t event_id) {
  SequenceDecision decision;
  auto [it, inserted] = streams_.try_emplace(stream);
  StreamState& state = it->second;
  if (inserted) {
    state.watermark = event_id;
    ++counters_.applied;
    return decision;
  }
  if (event_id <= state.watermark) {
    const bool restarted_at_zero = event_id == 0 && state.watermark > 0;
    const bool far_backwards = options_.reset_distance > 0 && state.watermark - event_id > options_.reset_distance;
    if (!restarted_at_zero && !far_backwards) {
      decision.verdict = SequenceVerdict::duplicate;
      ++counters_.duplicates;
      return decision;
    }
    decision.verdict = SequenceVerdict::reset;
    decision.clear_stream_first = true;
    state.watermark = event_id;
    state.gap_reported = false;
    ++counters_.resets;
    ++counters_.applied;
    return decision;
  }
  if (event_id > state.watermark + 1) {
    decision.verdict = SequenceVerdict::gap;
    decision.missing = event_id - state.watermark - 1;
    decision.first_gap_in_stream = !state.gap_reported;
    decision.clear_stream_first = options_.clear_on_gap;
    state.gap_reported = true;
    ++counters_.gaps;
    counters_.missing_events += decision.missing;
  }
  state.watermark = event_id;
  ++counters_.applied;
  return decision;
}

std::optional<std::uint64_t> StreamSequencer::watermark(WorkerWithDpRank stream) const {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return std::nullopt;
  return it->second.watermark;
}

void StreamSequencer::restore(WorkerWithDpRank stream, std::uint64_t watermark) {
  streams_[stream] = StreamState{watermark, false};
}

void StreamSequencer::forget(WorkerWithDpRank stream) { streams_.erase(stream); }

void StreamSequencer::forget_worker(WorkerId worker) {
  std::erase_if(streams_, [worker](const auto& entry) { return entry.first.worker_id == worker; });
}

void StreamSequencer::clear() { streams_.clear(); }

std::vector<std::pair<WorkerWithDpRank, std::uint64_t>> StreamSequencer::watermarks() const {
  std::vector<std::pair<WorkerWithDpRank, std::uint64_t>> out;
  out.reserve(streams_.size());
  for (const auto& [stream, state] : streams_) out.emplace_back(stream, state.watermark);
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t StreamSequencer::streams_with_gaps() const {
  return static_cast<std::size_t>(
      std::count_if(streams_.begin(), streams_.end(), [](const auto& entry) { return entry.second.gap_reported; }));
}

}  // namespace kvidx
