// kvidx: KV-cache overlap index for LLM inference fleets. This file only assembles subcommands.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/cli_parser.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/nats_flags.h"

int main(int argc, char** argv) {
  using namespace kvidx::cli;
  Command app{"kvidx", "kvidx - KV-cache overlap index for LLM inference fleets (NATS in, scores out)"};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvidx 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off").capture_default_str();

  int exit_code = kExitOk;
  add_serve_command(app, exit_code);
  add_replay_command(app, exit_code);
  add_capture_command(app, exit_code);
  add_dump_command(app, exit_code);
  add_score_command(app, exit_code);
  add_stats_command(app, exit_code);
  add_publish_command(app, exit_code);
  add_bridge_command(app, exit_code);
  add_workers_command(app, exit_code);
  add_nkey_command(app, exit_code);

  // A command's stdout is its answer (JSON, a tree, an event log): log lines go to stderr, or a line
  // logged mid-command (NATS lost and reconnected, a new nonce) would land in what callers parse.
  // serve and bridge, whose stdout is their log, switch to it when they start.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvidx"));
  for (const auto& sub : app.subcommands()) {
    if (sub->name() != "serve" && sub->name() != "bridge") continue;
    sub->callback([run = sub->callback()](const ParsedCommand& parsed) {
      spdlog::set_default_logger(spdlog::stdout_color_mt("kvidx-service"));
      run(parsed);
    });
  }
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  // NOTE: first thing: --password/--token values are wiped from argv (what ps shows) before anything
  // else runs; CLI11 parses the copy.
  std::vector<std::string> args = scrub_secret_arguments(argc, argv);
  args.erase(args.begin());  // the program name
  return parse_command_line(app, std::move(args)).value_or(exit_code);
}
