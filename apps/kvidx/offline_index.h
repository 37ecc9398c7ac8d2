// Shared by replay, dump --events and stats --events: build the index from an event log,
// print the summary on stderr and decide the exit code for bad lines.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "libindexer/lanes/lane_indexer.h"
#include "replay/offline_replay.h"

namespace kvidx::cli {

class Command;

struct OfflineFlags {
  std::string events;
  std::size_t lanes = 2;
  std::optional<std::uint32_t> decode_threads;  // not given: default_decode_threads (offline_replay.h)
  bool strict = false;
  bool fail_on_bad = false;
  bool clear_on_gap = false;  // as `kvidx serve --clear-on-gap`
  bool quiet = false;
  const std::atomic<bool>* stop = nullptr;  // set: a SIGINT/SIGTERM ends the read (exit code 130)
};

// Adds --events (required unless `events_optional`), --lanes, --strict, --fail-on-bad,
// --clear-on-gap.
void add_offline_flags(Command& cmd, OfflineFlags& flags, bool events_required);

struct OfflineIndex {
  std::unique_ptr<LaneIndexer> indexer;
  ReplaySummary summary;
  int exit_code = 0;  // non-zero: stop and return it (error already printed); 3 may go on
};

// Checks that --events names a readable input (before any other work), then replays it.
OfflineIndex build_offline_index(const OfflineFlags& flags, const char* command);

}  // namespace kvidx::cli
