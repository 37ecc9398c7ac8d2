// kvidx replay: apply an event log offline, then answer a file of score queries.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/offline_index.h"
#include "replay/event_log_writer.h"
#include "replay/score_query_file.h"

namespace kvidx::cli {
namespace {

struct ReplayFlags {
  OfflineFlags offline;
  std::string queries;
  std::string scores_out = "-";
  std::string snapshot_out;
  std::uint32_t block_size = 16;
};

int answer_queries(const ReplayFlags& flags, const LaneIndexer& indexer) {
  EventLogWriter out(flags.scores_out);
  if (!out.ok()) {
    std::fprintf(stderr, "kvidx replay: %s\n", out.error().c_str());
    return kExitFailure;
  }
  std::uint64_t answered = 0;
  std::string bad;
  const std::string io_error = for_each_line(flags.queries, [&](std::uint64_t line_number, std::string_view line) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true;
    auto query = decode_score_query_line(line);
    if (!query.ok()) {
      bad = fmt::format("{}:{}: {}", flags.queries, line_number, query.error().message());
      return false;
    }
    out.write_raw_line(encode_score_line(query.value(), indexer.find_matches(query.value().local_hashes, false)));
    ++answered;
    return true;
  });
  const bool closed = out.close();
  std::fprintf(stderr, "replay: %llu queries answered\n", static_cast<unsigned long long>(answered));
  if (!io_error.empty() || !bad.empty() || !closed) {
    std::fprintf(stderr, "kvidx replay: %s\n", !io_error.empty() ? io_error.c_str() : !bad.empty() ? bad.c_str() : out.error().c_str());
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

int run_replay(const ReplayFlags& flags) {
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

void add_replay_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ReplayFlags>();
  auto* cmd = app.add_subcommand("replay", "Apply a captured event log offline and answer queries from a file");
  add_offline_flags(*cmd, flags->offline, true);
  cmd->add_option("--queries", flags->queries,
                  "Query lines {\"id\": ..., \"local_hashes\": [u64...]} to answer after the log is applied");
  cmd->add_option("--scores-out", flags->scores_out,
                  "Where answers go, one {\"id\", \"scores\": [{worker_id, dp_rank, score}]} per query")
      ->capture_default_str();
  cmd->add_option("--snapshot-out", flags->snapshot_out, "Write the final tree as an event log of Stored events");
  cmd->add_option("--block-size", flags->block_size, "Tokens per block (recorded for token-based tooling)")
      ->capture_default_str();
  cmd->footer(
      "Example: kvidx replay --events captured.jsonl.gz --queries queries.jsonl --scores-out scores.jsonl\n"
      "Scores list only workers with score > 0, sorted by (worker_id, dp_rank), one line per query in order.");
  cmd->callback([flags, &exit_code] { exit_code = run_replay(*flags); });
}

}  // namespace kvidx::cli
