// Timed runs of an Engine shared by the workload benches: applying a list of events, and timing
// find_matches one query at a time.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench/common/engines.h"
#include "bench/common/report.h"

namespace kvidx::bench {

// Seconds to apply `events` and wait for them. NOTE: a copy made outside the clock is applied;
// the caller's events stay allocated, so memory they free cannot be reused by the index and hide
// its growth from an RSS delta.
double apply_all(Engine& engine, const std::vector<RouterEvent>& events);

// One index's figures of a run, by figure key.
struct Figures {
  std::map<std::string, double> values;
};

// Adds the row of figure `key` (kvidx's value beside each baseline's); no row when an index lacks it.
void add_engine_row(Report& report, const std::vector<std::pair<EngineKind, Figures>>& results, std::string figure,
                    std::string unit, bool higher_is_better, const std::string& key);

// find_matches latency of every query, on the calling thread.
Percentiles time_queries(const Engine& engine, const std::vector<std::vector<LocalBlockHash>>& queries);

// Reads `query` once, before a latency clock starts. The service hashes a request's tokens right
// before it queries, so the query is in cache there; a bench's list of queries (tens of MB) is
// not, and reading it from memory would be timed as the index's latency. Returns a value for a sink.
inline std::uint64_t warm_query(std::span<const LocalBlockHash> query) {
  std::uint64_t sum = 0;
  for (const auto hash : query) sum += hash.value;
  return sum;
}

}  // namespace kvidx::bench
