// Process exit codes of every kvidx subcommand (documented in --help and README).
#pragma once

namespace kvidx::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // runtime error (I/O, service failure)
inline constexpr int kExitUsage = 2;        // bad flags or arguments
inline constexpr int kExitBadInput = 3;     // bad input lines seen and --fail-on-bad given
inline constexpr int kExitUnreachable = 4;  // NATS unreachable, authentication refused, or no reply in time
// Incomplete: `publish` had events the server did not acknowledge, or a multi-message reply (dump,
// chunked score/workers reply) arrived incomplete (its end marker's counts differ from what arrived,
// or it stopped before its end marker).
inline constexpr int kExitIncomplete = 5;
inline constexpr int kExitInterrupted = 130;  // SIGINT/SIGTERM before the work was done (partial summary printed)

inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok, 1 runtime error (also a missing or unreadable input file), 2 usage error, "
    "3 bad input lines with --fail-on-bad, 4 NATS unreachable, authentication refused or request timed out, "
    "5 incomplete (publish: some events not acknowledged; dump or chunked reply: messages lost), "
    "130 interrupted (Ctrl-C) before the work was done.";

}  // namespace kvidx::cli
