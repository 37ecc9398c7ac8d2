// kvidx-bench: the workload benchmarks of kvidx beside two baselines in the same run (see
// bench/README section of the top-level README). Run by scripts/bench; smoke-run by CTest.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "bench/app/commands.h"

using namespace kvidx::bench;

namespace {

void add_common(CLI::App& cmd, CommonArgs& common) {
  cmd.add_option("--json-dir", common.json_dir, "Directory for <bench>.json")->capture_default_str();
  cmd.add_option("--engines", common.engines, "Indexes to run: kvidx, mutex-radix, flat-hash, positional")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvidx-bench - kvidx workload benchmarks beside baselines (mutex radix tree, flat hash map)",
               "kvidx-bench"};
  app.require_subcommand(1);
  spdlog::set_level(spdlog::level::warn);
  int exit_code = 0;

  MooncakeArgs mooncake;
  auto* m = app.add_subcommand("mooncake", "Mooncake trace through simulated workers: offered/achieved ops/s, p99");
  add_common(*m, mooncake.common);
  m->add_option("--trace", mooncake.trace, "Mooncake trace (JSON Lines)")->required();
  m->add_option("--workers", mooncake.workers, "Unique simulated workers")->capture_default_str();
  m->add_option("-d,--duplicate", mooncake.copies, "Copies of the fleet in disjoint hash spaces")
      ->capture_default_str();
  m->add_option("--sim-duration-ms", mooncake.sim_duration_ms, "The trace rescaled to this duration")
      ->capture_default_str();
  m->add_flag("--sweep", mooncake.sweep, "Offer the trace over shrinking windows (else one window = sim duration)");
  m->add_option("--sweep-min-ms", mooncake.sweep_min_ms)->capture_default_str();
  m->add_option("--sweep-max-ms", mooncake.sweep_max_ms)->capture_default_str();
  m->add_option("--sweep-steps", mooncake.sweep_steps)->capture_default_str();
  m->add_flag("--full-sweep", mooncake.full_sweep,
              "Keep shrinking the window after an index saturates (achieved < half of offered); by default its "
              "shorter windows are skipped, since each one only re-measures saturation and takes ops/achieved seconds");
  m->add_option("--lanes", mooncake.lanes, "Event lanes (threads) per index")->capture_default_str();
  m->add_option("--find-matches-concurrency", mooncake.find_matches_concurrency, "find_matches threads")
      ->capture_default_str();
  m->add_option("--capacity-blocks", mooncake.capacity_blocks, "Per-worker cache size (LRU)")->capture_default_str();
  m->add_option("--store-chunk-blocks", mooncake.store_chunk_blocks, "Blocks per Stored event")->capture_default_str();
  m->add_option("--max-requests", mooncake.max_requests, "Use only the first N trace requests (0: all)")
      ->capture_default_str();
  m->callback([&] { exit_code = run_mooncake(mooncake); });

  GrowthArgs growth;
  auto* g = app.add_subcommand("growth",
                               "Scaling: apply, find_matches and RSS at 1M/10M/100M holdings; RSS under prefix churn");
  add_common(*g, growth.common);
  g->add_option("--sizes", growth.sizes, "Index sizes in millions of (worker, block) holdings (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  g->add_option("--lanes", growth.lanes)->capture_default_str();
  g->add_option("--queries", growth.queries, "128-block queries per size")->capture_default_str();
  g->add_option("--churn-workers", growth.churn_workers)->capture_default_str();
  g->add_option("--churn-keep", growth.churn_keep, "Sequences each worker keeps (LRU)")->capture_default_str();
  g->add_option("--churn-bases", growth.churn_bases, "Base sequences new ones share a random prefix with")
      ->capture_default_str();
  g->add_option("--churn-depth", growth.churn_depth, "Blocks per churned sequence")->capture_default_str();
  g->add_option("--churn-rounds", growth.churn_rounds, "Churn after warm-up, in multiples of the warm-up (0: none)")
      ->capture_default_str();
  g->callback([&] { exit_code = run_growth(growth); });

  SyntheticArgs synthetic;
  auto* s = app.add_subcommand("synthetic",
                               "W workers x depth-D prefixes with shared system prompts: apply 1 vs N lanes, memory, "
                               "find_matches latency idle/under writers, mixed ops/s, snapshot");
  add_common(*s, synthetic.common);
  s->add_option("--workers", synthetic.workers)->capture_default_str();
  s->add_option("--tenants", synthetic.tenants, "Shared system prompts (worker w in tenant w % T)")
      ->capture_default_str();
  s->add_option("--depth", synthetic.depth, "Blocks per sequence")->capture_default_str();
  s->add_option("--prompt-blocks", synthetic.prompt_blocks)->capture_default_str();
  s->add_option("--sequences-per-worker", synthetic.sequences_per_worker)->capture_default_str();
  s->add_option("--bodies", synthetic.bodies, "Distinct sequence bodies")->capture_default_str();
  s->add_option("--lanes", synthetic.lanes, "N of 1 lane vs N lanes")->capture_default_str();
  s->add_option("--readers", synthetic.readers, "find_matches threads in the mixed run")->capture_default_str();
  s->add_option("--queries", synthetic.queries, "Queries per length for the latency figures")->capture_default_str();
  s->add_option("--churn-pairs", synthetic.churn_pairs, "Removed+Stored pairs for the writer load")
      ->capture_default_str();
  s->add_option("--mixed-queries", synthetic.mixed_queries)->capture_default_str();
  s->add_flag("!--no-snapshot", synthetic.snapshot, "Skip the dump/restore figures");
  s->callback([&] { exit_code = run_synthetic(synthetic); });

  ReplayArgs replay;
  auto* r = app.add_subcommand("replay", "Replay the Mooncake-derived event log (decode + apply)");
  add_common(*r, replay.common);
  r->add_option("--trace", replay.trace, "Mooncake trace (JSON Lines)")->required();
  r->add_option("--workers", replay.workers)->capture_default_str();
  r->add_option("-d,--duplicate", replay.copies)->capture_default_str();
  r->add_option("--capacity-blocks", replay.capacity_blocks)->capture_default_str();
  r->add_option("--store-chunk-blocks", replay.store_chunk_blocks)->capture_default_str();
  r->add_option("--max-requests", replay.max_requests)->capture_default_str();
  r->add_option("--lanes", replay.lanes)->capture_default_str();
  r->add_option("--log-events", replay.log.events, "Events of the generated log (0: skip that part)")
      ->capture_default_str();
  r->add_option("--log-blocks", replay.log.blocks, "Blocks per event of the generated log")->capture_default_str();
  r->add_option("--log-streams", replay.log.streams, "(worker, rank) streams of the generated log")
      ->capture_default_str();
  r->add_option("--decode-threads", replay.log.decode_threads,
                "Decode threads of the generated log's replay (default: kvidx replay's for these lanes; the "
                "other column is the alternative: 2 decode threads, or decoding on the applying thread)");
  r->add_option("--log-keep", replay.log.keep_dir,
                "Write the generated logs (plain and gzip) into this directory and keep them, e.g. to profile "
                "`kvidx replay` on them")
      ->check(CLI::ExistingDirectory);
  r->callback([&] { exit_code = run_replay(replay); });

  E2eArgs e2e;
  auto* e = app.add_subcommand("e2e", "Published -> applied over a local nats-server, beside a raw nats.c subscriber");
  add_common(*e, e2e.common);
  e->add_option("--events", e2e.events)->capture_default_str();
  e->add_option("--lanes", e2e.lanes)->capture_default_str();
  e->add_option("--per-message", e2e.per_message, "Events per NATS message (one table row pair per value)")
      ->delimiter(',')
      ->capture_default_str();
  e->add_option("--repeats", e2e.repeats, "Runs per cell; the median is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  e->add_option("--query-seconds", e2e.query_seconds,
                "Seconds of back-to-back score queries per run and requester count (0: no query rows)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  e->add_option("--query-requesters", e2e.query_requesters,
                "Concurrent requesters of the second query row (each on its own connection)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  e->callback([&] { exit_code = run_e2e(e2e); });

  std::string summary_dir = "build/bench";
  auto* sum = app.add_subcommand("summary", "One table from every <json-dir>/*.json");
  sum->add_option("--json-dir", summary_dir)->capture_default_str();
  sum->callback([&] { exit_code = run_summary(summary_dir); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err);
  } catch (const std::exception& err) {
    std::fprintf(stderr, "kvidx-bench: %s\n", err.what());
    return 1;
  }
  return exit_code;
}
