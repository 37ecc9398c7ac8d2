// Turns a Mooncake request trace (one JSON per line: timestamp, input_length, output_length,
// hash_ids of 512-token blocks) into the KV events a fleet of simulated LRU workers would publish.
// Deterministic for a given trace and options. Used by replay tests and by kvidx-bench.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx {

struct MooncakeRequest {
  std::uint64_t timestamp_ms = 0;
  std::uint32_t input_length = 0;
  std::uint32_t output_length = 0;
  std::vector<std::uint64_t> hash_ids;
};

// Loads a trace; on failure returns false with `error` set to "file:line: reason".
bool load_mooncake_trace(const std::string& path, std::vector<MooncakeRequest>& out, std::string& error);

struct WorkloadOptions {
  std::size_t workers = 16;            // simulated workers per copy
  std::size_t copies = 1;              // the fleet duplicated in disjoint hash spaces
  DpRank dp_ranks = 1;                 // ranks per worker (each its own cache)
  std::size_t capacity_blocks = 2048;  // per (worker, rank) cache size; LRU evicts leaves first
  std::size_t store_chunk_blocks = 8;  // blocks per Stored event (engines store per step)
  std::uint64_t seed = 1;              // routing salt
};

// One simulated request after routing: the local hashes a router would query with.
struct RoutedRequest {
  std::uint64_t timestamp_ms = 0;
  WorkerWithDpRank target;
  std::vector<LocalBlockHash> local_hashes;
};

struct WorkloadSink {
  std::function<void(RouterEvent&&)> on_event;           // in publish order
  std::function<void(const RoutedRequest&)> on_request;  // before that request's events (optional)
};

struct WorkloadStats {
  std::uint64_t requests = 0;
  std::uint64_t stored_events = 0;
  std::uint64_t removed_events = 0;
  std::uint64_t stored_blocks = 0;
  std::uint64_t removed_blocks = 0;
};

// Simulates every request of `trace` (in timestamp order, each copy in turn) and emits events.
WorkloadStats simulate_workload(const std::vector<MooncakeRequest>& trace, const WorkloadOptions& options,
                                const WorkloadSink& sink);

}  // namespace kvidx
