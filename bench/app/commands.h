// kvidx-bench subcommands. main.cpp parses flags (CLI11) into these structs; each run_* prints its
// rows as a table and writes <json_dir>/<name>.json. They return a process exit code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/common/engines.h"

namespace kvidx::bench {

struct CommonArgs {
  std::string json_dir = "build/bench";
  std::vector<std::string> engines = {"kvidx", "mutex-radix", "flat-hash", "positional"};
  std::vector<EngineKind> engine_kinds() const;  // kvidx always first
};

struct MooncakeArgs {
  CommonArgs common;
  std::string trace;
  std::size_t workers = 1000;
  std::size_t copies = 7;  // -d
  std::uint64_t sim_duration_ms = 10'000;
  bool sweep = false;
  std::uint64_t sweep_min_ms = 1000;
  std::uint64_t sweep_max_ms = 30'000;
  std::size_t sweep_steps = 8;
  bool full_sweep = false;  // else an index's sweep ends once it saturates
  std::size_t lanes = 2;
  std::size_t find_matches_concurrency = 1;
  std::size_t capacity_blocks = 512;
  std::size_t store_chunk_blocks = 64;
  std::size_t max_requests = 0;  // 0: the whole trace
};
int run_mooncake(const MooncakeArgs& args);

struct SyntheticArgs {
  CommonArgs common;
  std::size_t workers = 1000;
  std::size_t tenants = 32;
  std::size_t depth = 128;
  std::size_t prompt_blocks = 32;
  std::size_t sequences_per_worker = 104;
  std::size_t bodies = 10'600;
  std::size_t lanes = 2;         // the N of "1 lane vs N lanes"
  std::size_t readers = 1;       // find_matches threads in the mixed run
  std::size_t queries = 20'000;  // per query length, idle and under writers
  std::size_t churn_pairs = 20'000;
  std::size_t mixed_queries = 200'000;
  bool snapshot = true;
};
int run_synthetic(const SyntheticArgs& args);

// The generated log of the replay part (replay_log_cmd.cpp).
struct ReplayLogArgs {
  std::size_t events = 1'000'000;  // 0: skip this part
  std::size_t blocks = 21;         // per Stored/Removed event
  std::size_t streams = 512;       // (worker, rank) streams taking turns
  std::size_t lanes = 2;
  std::optional<std::size_t> decode_threads;  // not given: `kvidx replay`'s default (default_decode_threads)
  std::string keep_dir;                       // non-empty: the generated logs are written here and kept (for profiling)
};

struct ReplayArgs {
  CommonArgs common;
  ReplayLogArgs log;
  std::string trace;
  std::size_t workers = 1000;
  std::size_t copies = 7;
  std::size_t capacity_blocks = 512;
  std::size_t store_chunk_blocks = 64;
  std::size_t max_requests = 0;
  std::size_t lanes = 2;
};
int run_replay(const ReplayArgs& args);
class Report;
int run_replay_log(const ReplayLogArgs& args, Report& report);  // adds its rows to `report`

struct E2eArgs {
  CommonArgs common;
  std::size_t events = 200'000;
  std::size_t lanes = 2;
  std::vector<std::size_t> per_message{1, 16};
  std::size_t repeats = 3;
  double query_seconds = 2;          // per score-query run (0: no query rows)
  std::size_t query_requesters = 4;  // the second query row's concurrent requesters
};
int run_e2e(const E2eArgs& args);

struct GrowthArgs {
  CommonArgs common{.json_dir = "build/bench", .engines = {"kvidx"}};
  std::vector<double> sizes{1, 10, 100};  // millions of (worker, block) holdings
  std::size_t lanes = 2;
  std::size_t queries = 5000;
  std::size_t churn_workers = 300;
  std::size_t churn_keep = 32;    // sequences each worker keeps (LRU)
  std::size_t churn_bases = 256;  // base sequences new ones share a prefix with
  std::size_t churn_depth = 128;  // blocks per sequence
  std::size_t churn_rounds = 5;   // churn after warm-up, in warm-ups (0: no churn)
};
int run_growth(const GrowthArgs& args);

int run_summary(const std::string& json_dir);

}  // namespace kvidx::bench
