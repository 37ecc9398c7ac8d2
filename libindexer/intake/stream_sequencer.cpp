#include "libindexer/intake/stream_sequencer.h"

#include <algorithm>

namespace kvidx {

SequenceDecision StreamSequencer::observe(WorkerWithDpRank stream, std::uint64_t event_id) {
  SequenceDecision decision;
  auto [it, inserted] = streams_.try_emplace(stream);
  StreamState& state = it->second;
  if (inserted || !state.seen) {
    state.seen = true;
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

std::optional<std::vector<WorkerWithDpRank>> StreamSequencer::refuse_new_streams(std::span<const RouterEvent> events) {
  if (options_.max_streams == 0) return std::nullopt;
  unknown_.clear();
  for (const RouterEvent& e : events) {
    if (!streams_.contains(e.stream())) unknown_.push_back(e.stream());
  }
  if (unknown_.empty()) return std::nullopt;
  std::sort(unknown_.begin(), unknown_.end());
  unknown_.erase(std::unique(unknown_.begin(), unknown_.end()), unknown_.end());
  // NOTE: a limit lowered below what a restored snapshot holds admits no new stream until
  // removals bring the count under it; known streams go on as before.
  if (streams_.size() + unknown_.size() > options_.max_streams) return unknown_;
  for (const WorkerWithDpRank& stream : unknown_) streams_.emplace(stream, StreamState{0, false, false});
  return std::nullopt;
}

std::optional<std::uint64_t> StreamSequencer::watermark(WorkerWithDpRank stream) const {
  auto it = streams_.find(stream);
  if (it == streams_.end() || !it->second.seen) return std::nullopt;
  return it->second.watermark;
}

void StreamSequencer::restore(WorkerWithDpRank stream, std::uint64_t watermark) {
  streams_[stream] = StreamState{watermark, false, true};
}

void StreamSequencer::forget(WorkerWithDpRank stream) { streams_.erase(stream); }

void StreamSequencer::forget_worker(WorkerId worker) {
  std::erase_if(streams_, [worker](const auto& entry) { return entry.first.worker_id == worker; });
}

void StreamSequencer::clear() { streams_.clear(); }

std::vector<std::pair<WorkerWithDpRank, std::uint64_t>> StreamSequencer::watermarks() const {
  std::vector<std::pair<WorkerWithDpRank, std::uint64_t>> out;
  out.reserve(streams_.size());
  for (const auto& [stream, state] : streams_) {
    if (state.seen) out.emplace_back(stream, state.watermark);  // reserved streams have no watermark yet
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t StreamSequencer::streams_with_gaps() const {
  return static_cast<std::size_t>(
      std::count_if(streams_.begin(), streams_.end(), [](const auto& entry) { return entry.second.gap_reported; }));
}

}  // namespace kvidx
