// Process exit codes of every kvidx subcommand (documented in --help and README).
#pragma once

namespace kvidx::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;     // runtime error (I/O, service failure)
inline constexpr int kExitUsage = 2;       // bad flags or arguments
inline constexpr int kExitBadInput = 3;    // bad input lines seen and --fail-on-bad given
inline constexpr int kExitUnreachable = 4; // NATS unreachable or no reply before the timeout
// A multi-message reply (dump, chunked score/workers reply) arrived incomplete: its end marker's
// counts differ from what arrived, or it stopped before its end marker.
inline constexpr int kExitIncomplete = 5;

inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 bad input lines with --fail-on-bad, "
    "4 NATS unreachable or request timed out, 5 reply incomplete (a dump or chunked reply lost messages).";

}  // namespace kvidx::cli
