// kvidx replay: apply an event log offline, then answer a file of score queries.
#include <fmt/format.h>

#include <cstdio>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/interrupt.h"
#include "apps/kvidx/offline_index.h"
#include "libcodec/score_line_codec.h"
#include "replay/event_log_writer.h"

namespace kvidx::cli {
namespace {

struct ReplayFlags {
  OfflineFlags offline;
  std::string queries;
  std::string scores_out = "-";
  std::string snapshot_out;
  std::uint32_t block_size = 16;
  std::string tier_weights = format_tier_weights(TierWeights{});
  TierWeights weights;  // parsed from tier_weights before any work
};

int answer_queries(const ReplayFlags& flags, const LaneIndexer& indexer) {
  EventLogWriter out(flags.scores_out);
  if (!out.ok()) {
    std::fprintf(stderr, "kvidx replay: %s\n", out.error().c_str());
    return kExitFailure;
  }
  std::uint64_t answered = 0;
  std::string bad;
  bool stopped = false;
  const std::string io_error = for_each_line(flags.queries, [&](std::uint64_t line_number, std::string_view line) {
    if (interrupted().load()) {
      stopped = true;
      return false;
    }
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true;
    auto query = decode_score_query_line(line);
    if (!query.ok()) {
      bad = fmt::format("{}:{}: {}", flags.queries, line_number, query.error().message());
      return false;
    }
    out.write_raw_line(encode_score_line(query.value(), indexer.find_tiered_matches(query.value().local_hashes, false),
                                         flags.weights));
    ++answered;
    return true;
  });
  stopped = stopped || interrupted().load();
  const bool closed = out.close();
  std::fprintf(stderr, "replay: %s%llu queries answered%s\n", stopped ? "INTERRUPTED after " : "",
               static_cast<unsigned long long>(answered), stopped ? " (partial: the rest were not read)" : "");
  if (stopped && bad.empty() && closed) {
    std::fprintf(stderr, "kvidx replay: interrupted: %s holds the answers to the first %llu queries only\n",
                 flags.scores_out.c_str(), static_cast<unsigned long long>(answered));
    return kExitInterrupted;
  }
  if ((!io_error.empty() && !stopped) || !bad.empty() || !closed) {
    std::fprintf(stderr, "kvidx replay: %s\n",
                 !io_error.empty() ? io_error.c_str()
                 : !bad.empty()    ? bad.c_str()
                                   : out.error().c_str());
    return !bad.empty() ? kExitBadInput : kExitFailure;
  }
  return kExitOk;
}

int write_snapshot(const std::string& path, LaneIndexer& indexer) {
  auto events = indexer.dump_events();
  if (!events) {
    std::fprintf(stderr, "kvidx replay: the indexer is offline, no snapshot written\n");
    return kExitFailure;
  }
  EventLogWriter out(path);
  for (const auto& event : *events) out.write(event);
  if (!out.close()) {
    std::fprintf(stderr, "kvidx replay: %s\n", out.error().c_str());
    return kExitFailure;
  }
  std::fprintf(stderr, "replay: snapshot of %zu Stored events written to %s\n", events->size(), path.c_str());
  return kExitOk;
}

// Every file named on the command line, before any work: a missing --queries file must not cost
// the user a full replay first. Returns the exit code (0: all usable).
int check_files(const ReplayFlags& flags) {
  if (flags.offline.events == "-" && flags.queries == "-") {
    std::fprintf(stderr, "kvidx replay: --events and --queries cannot both be '-' (stdin)\n");
    return kExitUsage;
  }
  for (const std::string& input : {flags.offline.events, flags.queries}) {
    if (input.empty()) continue;
    if (const std::string error = check_input_file(input); !error.empty()) {
      std::fprintf(stderr, "kvidx replay: %s\n", error.c_str());
      return kExitFailure;
    }
  }
  for (const std::string& output : {flags.queries.empty() ? std::string() : flags.scores_out, flags.snapshot_out}) {
    if (output.empty()) continue;
    if (const std::string error = check_output_file(output); !error.empty()) {
      std::fprintf(stderr, "kvidx replay: %s\n", error.c_str());
      return kExitFailure;
    }
  }
  return kExitOk;
}

int run_replay(ReplayFlags& flags) {
  {
    std::string error;
    const auto weights = parse_tier_weights(flags.tier_weights, error);
    if (!weights) {
      std::fprintf(stderr, "kvidx replay: bad --tier-weights '%s': %s\n", flags.tier_weights.c_str(), error.c_str());
      return kExitUsage;
    }
    flags.weights = *weights;
  }
  if (const int rc = check_files(flags); rc != kExitOk) return rc;
  // NOTE: Ctrl-C stops reading; what was read is applied and summarised (exit 130).
  install_interrupt_handlers();
  flags.offline.stop = &interrupted();
  auto built = build_offline_index(flags.offline, "replay");
  if (built.exit_code != kExitOk && built.exit_code != kExitBadInput) return built.exit_code;
  int code = built.exit_code;
  if (!flags.queries.empty()) {
    if (int rc = answer_queries(flags, *built.indexer); rc != kExitOk) return rc;
  }
  if (!flags.snapshot_out.empty()) {
    if (int rc = write_snapshot(flags.snapshot_out, *built.indexer); rc != kExitOk) return rc;
  }
  return code;
}

}  // namespace

void add_replay_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<ReplayFlags>();
  Command& cmd = app.add_subcommand("replay", "Apply a captured event log offline and answer queries from a file");
  add_offline_flags(cmd, flags->offline, true);
  cmd.add_option("--queries", flags->queries,
                 "Query lines {\"id\": ..., \"local_hashes\": [u64...]} to answer after the log is applied");
  cmd.add_option("--scores-out", flags->scores_out,
                 "Where answers go, one {\"id\", \"scores\": [{worker_id, dp_rank, score}]} per query")
      .capture_default_str();
  cmd.add_option("--tier-weights", flags->tier_weights,
                 "Weights of the storage tiers in an answer's combined_scores, TIER=WEIGHT,... (as kvidx serve)")
      .capture_default_str();
  cmd.add_option("--snapshot-out", flags->snapshot_out, "Write the final tree as an event log of Stored events");
  cmd.add_option("--block-size", flags->block_size, "Tokens per block (recorded for token-based tooling)")
      .capture_default_str();
  cmd.footer(
      "Example: kvidx replay --events captured.jsonl.gz --queries queries.jsonl --scores-out scores.jsonl\n"
      "Scores list only workers with score > 0, sorted by (worker_id, dp_rank), one line per query in order;\n"
      "they are the device tier's: lower tiers add tier_scores and combined_scores (see README, Wire format).\n"
      "Every file is checked before the log is read. On a terminal a progress line shows events/s, bytes read and\n"
      "the ETA. Ctrl-C stops reading, applies what was read, prints that partial summary and exits 130.");
  cmd.callback([flags, &exit_code] { exit_code = run_replay(*flags); });
}

}  // namespace kvidx::cli
