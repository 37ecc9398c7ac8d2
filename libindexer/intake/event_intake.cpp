#include "libindexer/intake/event_intake.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace kvidx {

IntakeTally& IntakeTally::operator+=(const IntakeTally& other) {
  for (std::size_t k = 0; k < accepted_by_kind.size(); ++k) {
    accepted_by_kind[k] += other.accepted_by_kind[k];
    duplicates_by_kind[k] += other.duplicates_by_kind[k];
  }
  gaps += other.gaps;
  missing_events += other.missing_events;
  resets += other.resets;
  clears_inserted += other.clears_inserted;
  return *this;
}

EventIntake::EventIntake(IntakeOptions options) : options_(options), sequencer_(options.sequencing) {}

IntakeTally EventIntake::admit(std::span<RouterEvent> events, std::vector<RouterEvent>& out) {
  IntakeTally tally;
  for (RouterEvent& e : events) {
    const auto kind = static_cast<std::size_t>(kind_of(e.event.data));
    const SequenceDecision d = sequencer_.observe(e.stream(), e.event.event_id);
    if (!d.should_apply()) {
      ++tally.duplicates_by_kind[kind];
      continue;
    }
    if (d.verdict == SequenceVerdict::gap) {
      ++tally.gaps;
      tally.missing_events += d.missing;
      if (options_.log_streams && d.first_gap_in_stream) {
        spdlog::warn("event gap on worker {} rank {}: {} event(s) missing before event_id {} (logged once per stream)",
                     e.worker_id, e.event.dp_rank, d.missing, e.event.event_id);
      }
    } else if (d.verdict == SequenceVerdict::reset) {
      ++tally.resets;
      if (options_.log_streams) {
        spdlog::info("worker {} rank {} restarted (event_id {}): clearing its blocks", e.worker_id, e.event.dp_rank,
                     e.event.event_id);
      }
    }
    // NOTE: the clear goes out right before the event, in the same batch: one stream's events
    // reach one lane in order, so the clear never overtakes or trails the event that caused it.
    if (d.clear_stream_first) {
      RouterEvent clear;
      clear.worker_id = e.worker_id;
      clear.event.event_id = e.event.event_id;
      clear.event.dp_rank = e.event.dp_rank;
      clear.event.data = KvCacheClearData{};
      out.push_back(std::move(clear));
      ++tally.clears_inserted;
    }
    out.push_back(std::move(e));
    ++tally.accepted_by_kind[kind];
  }
  totals_ += tally;
  return tally;
}

}  // namespace kvidx
