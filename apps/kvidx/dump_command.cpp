// kvidx dump: the index as Stored events (an event log that replays to the same index), from a
// running service (--nats) or from an event log (--events); --tree prints a readable tree instead.

#include <cstdio>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/live_client.h"
#include "apps/kvidx/offline_index.h"
#include "replay/dump_view.h"
#include "replay/event_log_writer.h"

namespace kvidx::cli {
namespace {

struct DumpFlags {
  OfflineFlags offline;
  LiveFlags live;
  std::string out = "-";
  bool tree = false;
};

int write_dump(const DumpFlags& flags, const std::vector<RouterEvent>& events) {
  EventLogWriter out(flags.out);
  if (flags.tree) {
    DumpView view;
    for (const auto& event : events) view.add(event);
    out.write_raw_line(view.render_tree());
  } else {
    for (const auto& event : events) out.write(event);
  }
  if (!out.close()) {
    std::fprintf(stderr, "kvidx dump: %s\n", out.error().c_str());
    return kExitFailure;
  }
  return kExitOk;
}

int run_dump(DumpFlags& flags) {
  int exit_code = kExitOk;
  if (!flags.live.nats.url.empty()) {
    auto client = LiveClient::connect(flags.live, "dump", exit_code);
    if (!client) return exit_code;
    auto events = client->dump(exit_code);
    if (!events) return exit_code;
    return write_dump(flags, *events);
  }
  flags.offline.quiet = true;
  auto built = build_offline_index(flags.offline, "dump");
  if (built.exit_code != kExitOk && built.exit_code != kExitBadInput) return built.exit_code;
  auto events = built.indexer->dump_events();
  if (!events) {
    std::fprintf(stderr, "kvidx dump: the indexer went offline\n");
    return kExitFailure;
  }
  const int rc = write_dump(flags, *events);
  return rc != kExitOk ? rc : built.exit_code;
}

}  // namespace

void add_dump_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<DumpFlags>();
  Command& cmd = app.add_subcommand("dump", "Dump the index as Stored events (live over NATS or from an event log)");
  add_live_flags(cmd, flags->live, /*live_needs_nats_flag=*/true);
  add_shard_flag(cmd, flags->live);
  add_offline_flags(cmd, flags->offline, false);
  cmd.add_option("--out", flags->out, "Where to write ('-' for stdout, .gz compresses)").capture_default_str();
  cmd.add_flag("--tree", flags->tree, "Print a readable tree (edges and covering worker/rank) instead of events");
  cmd.get_option("--nats").excludes("--events");
  cmd.get_option("--events").excludes("--nats");
  cmd.footer(
      "Exactly one of --nats or --events.\n"
      "Examples: kvidx dump --nats nats://127.0.0.1:4222 --out snapshot.jsonl.gz\n"
      "          kvidx dump --events captured.jsonl.gz --tree");
  cmd.callback([flags, &exit_code] {
    if (flags->live.nats.url.empty() && flags->offline.events.empty()) {
      std::fprintf(stderr, "kvidx dump: give --nats URL (live) or --events FILE (offline)\n");
      exit_code = kExitUsage;
      return;
    }
    exit_code = run_dump(*flags);
  });
}

}  // namespace kvidx::cli
