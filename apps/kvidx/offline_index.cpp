#include "apps/kvidx/offline_index.h"

#include <unistd.h>
#include <cstdio>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/exit_codes.h"

namespace kvidx::cli {

void add_offline_flags(Command& cmd, OfflineFlags& flags, bool events_required) {
  Option& events = cmd.add_option("--events", flags.events, "Event log to apply (JSON Lines, .gz ok, '-' for stdin)");
  if (events_required) events.required();
  cmd.add_option("--lanes", flags.lanes, "Writer lanes (threads) applying events")
      .check(InRange{1, 256})
      .capture_default_str();
  cmd.add_option("--decode-threads", flags.decode_threads,
                 "Threads decoding the log's JSON while the lanes apply it (0: decode on the applying thread; "
                 "events are applied in log order either way). auto: the cores left beside the lanes, the "
                 "reading and the applying thread, at most 8; at least 1 for a gzip log (a file or stdin)")
      .check(InRange{0, 64})
      .default_str("auto");
  cmd.add_flag("--strict", flags.strict, "Stop at the first bad line with file:line: reason");
  cmd.add_flag("--fail-on-bad", flags.fail_on_bad, "Exit 3 if any line was bad");
  cmd.add_flag("--clear-on-gap", flags.clear_on_gap,
               "On an event_id gap, clear that stream's blocks first (as `kvidx serve --clear-on-gap`)");
}

OfflineIndex build_offline_index(const OfflineFlags& flags, const char* command) {
  OfflineIndex out;
  if (const std::string unreadable = check_input_file(flags.events); !unreadable.empty()) {
    std::fprintf(stderr, "kvidx %s: %s\n", command, unreadable.c_str());
    out.exit_code = kExitFailure;
    return out;
  }
  out.indexer = std::make_unique<LaneIndexer>(flags.lanes);
  ReplayOptions options;
  options.events_path = flags.events;
  options.lanes = flags.lanes;
  options.decode_threads = flags.decode_threads;  // not given: chosen once the log's first bytes are read
  options.bad_lines = flags.strict ? BadLinePolicy::stop : BadLinePolicy::skip;
  options.progress = !flags.quiet && isatty(STDERR_FILENO) != 0;
  options.stop = flags.stop;
  options.intake.sequencing.clear_on_gap = flags.clear_on_gap;
  out.summary = replay_event_log(*out.indexer, options);
  // A log that could not be opened has nothing to summarise: the one-line error says it all.
  const bool nothing_read = !out.summary.ok() && out.summary.read.lines == 0;
  if (!flags.quiet && !nothing_read) std::fputs(format_replay_summary(out.summary).c_str(), stderr);
  if (out.summary.interrupted && out.summary.ok()) {
    std::fprintf(stderr, "kvidx %s: interrupted: the index holds only the events read so far\n", command);
    out.exit_code = kExitInterrupted;
  } else if (!out.summary.ok()) {
    std::fprintf(stderr, "kvidx %s: %s\n", command, out.summary.error.c_str());
    out.exit_code = flags.strict && out.summary.read.bad_lines > 0 ? kExitBadInput : kExitFailure;
  } else if (flags.fail_on_bad && out.summary.read.bad_lines > 0) {
    out.exit_code = kExitBadInput;
  }
  return out;
}

}  // namespace kvidx::cli
