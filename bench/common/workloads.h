// Deterministic, seeded workloads for the benchmarks.
//  - Synthetic: W workers in T tenants; every tenant has one shared system prompt; a sequence is
//    prompt + body (depth D blocks in all); bodies belong to one tenant and are held by several of
//    its workers. Events are Stored (build), then Removed/Stored pairs (churn).
//  - Mooncake: the trace through simulated LRU workers (replay/mooncake_workload.h), as a timed
//    list of operations (events and find_matches requests) rescaled to a simulated duration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "libindexer/protocol.h"
#include "replay/mooncake_workload.h"

namespace kvidx::bench {

struct SyntheticOptions {
  std::size_t workers = 1000;
  std::size_t tenants = 32;  // one system prompt each; worker w belongs to tenant w % tenants
  std::size_t depth = 128;   // blocks per sequence
  std::size_t prompt_blocks = 32;
  std::size_t sequences_per_worker = 104;
  std::size_t bodies = 10'600;  // distinct bodies; body b belongs to tenant b % tenants
  std::uint64_t seed = 42;
  // Every worker names blocks its own way (engines without a shared hash seed): a worker's external
  // hash is its own mix of the shared chain hash. Same tree, same queries, only the names differ.
  bool per_engine_hashes = false;
};

struct SyntheticWorkload {
  SyntheticOptions options;
  std::vector<RouterEvent> build;  // Stored events, worker-interleaved
  std::uint64_t stored_blocks = 0;
  std::uint64_t holdings = 0;         // (stream, block) pairs held after the build
  std::uint64_t distinct_blocks = 0;  // distinct (prefix, block) nodes held after the build

  // Per worker: bodies held (churn state) and the next event id.
  std::vector<std::vector<std::uint32_t>> held;
  std::vector<std::vector<bool>> holds_prompt;
  std::vector<std::uint64_t> next_event_id;
  std::mt19937_64 rng;

  std::vector<LocalBlockHash> sequence(std::uint32_t body) const;  // prompt + body locals
  // The name `worker` gives a block whose shared chain hash is `chain` (itself unless per engine).
  ExternalSequenceBlockHash name(std::size_t worker, ExternalSequenceBlockHash chain) const;
  std::vector<std::vector<LocalBlockHash>> body_locals;
  std::vector<std::vector<ExternalSequenceBlockHash>> body_ext;
  std::vector<std::vector<LocalBlockHash>> prompt_local;
  std::vector<std::vector<ExternalSequenceBlockHash>> prompt_ext;
};

SyntheticWorkload make_synthetic(const SyntheticOptions& options);
// `pairs` Removed(body)/Stored(new body) pairs on random workers (plus a prompt Stored when needed).
std::vector<RouterEvent> make_churn(SyntheticWorkload& workload, std::size_t pairs);
// Queries of `length` blocks: prompt + a held body, cut or padded with never-stored blocks.
std::vector<std::vector<LocalBlockHash>> make_queries(const SyntheticWorkload& workload, std::size_t count,
                                                      std::size_t length, std::uint64_t seed);

struct MooncakeOps {
  struct Op {
    std::uint64_t t_us = 0;  // in the simulated timeline [0, sim_duration)
    std::uint32_t index = 0;
    bool is_request = false;
  };
  std::vector<RouterEvent> events;
  std::vector<std::vector<LocalBlockHash>> requests;
  std::vector<Op> ops;  // time order; a request before its own events
  WorkloadStats stats;
  std::uint64_t sim_duration_us = 0;
};

// Loads the trace and simulates it; on failure returns false with `error`.
bool make_mooncake_ops(const std::string& trace_path, const WorkloadOptions& options, std::uint64_t sim_duration_ms,
                       std::size_t max_requests, MooncakeOps& out, std::string& error);

}  // namespace kvidx::bench
