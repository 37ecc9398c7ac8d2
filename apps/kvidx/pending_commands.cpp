// Subcommands whose flags are fixed but whose implementation lands in a later issue. Each moves
// to its own file when implemented; until then it says so and exits 1.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"

namespace kvidx::cli {
namespace {

void not_yet(const char* name, int& exit_code) {
  std::fprintf(stderr, "kvidx: error: '%s' is not implemented in this build yet\n", name);
  exit_code = kExitFailure;
}

}  // namespace

void add_dump_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("dump", "Dump the index as Stored events (live over NATS or from an event log)");
  cmd->callback([&exit_code] { not_yet("dump", exit_code); });
}

void add_score_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("score", "Ask a running kvidx for overlap scores of a block sequence");
  cmd->callback([&exit_code] { not_yet("score", exit_code); });
}

void add_stats_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("stats", "Workers, ranks, blocks, nodes and event counts (live or from a log)");
  cmd->callback([&exit_code] { not_yet("stats", exit_code); });
}

}  // namespace kvidx::cli
