// Replay outcome counters depend only on each stream's own history: the same log replayed again
// and again through several lanes gives the same counts by event type and result every time, even
// though the lanes interleave differently and so split the shared tree's nodes differently.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_writer.h"
#include "replay/offline_replay.h"
#include "tests/support/child_process.h"
#include "tests/support/event_builders.h"
#include "tests/support/event_histories.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

// One stream's history in rounds: store a chain of 8 blocks from the root (local hashes from a
// 3-letter alphabet, so streams share prefixes and diverge at every depth), cut it at a shallow
// block, then name a deeper block of the same chain, which the cut already dropped; sometimes name
// that block once more, sometimes clear. Whether the deeper block sat on the cut node's edge or on
// a node below depends on where the other streams' stores split the shared path, i.e. on how the
// lanes interleaved; the results must not.
struct StreamHistory {
  std::vector<RouterEvent> events;
  std::uint64_t removed_ok = 0;         // cuts, and first namings of blocks a cut dropped
  std::uint64_t removed_not_found = 0;  // second namings
};

StreamHistory cut_then_name_below(WorkerId w, DpRank r, int rounds) {
  std::mt19937_64 rng(w * 1009 + r);
  StreamHistory out;
  auto stamp = [&](RouterEvent e) {
    e.worker_id = w;
    e.event.dp_rank = r;
    e.event.event_id = out.events.size();
    out.events.push_back(std::move(e));
  };
  for (int round = 0; round < rounds; ++round) {
    Hashes chain;
    for (int i = 0; i < 8; ++i) chain.push_back(1 + rng() % 3);
    stamp(make_store_event(w, chain));
    const std::size_t cut = 1 + rng() % 3;
    const std::size_t below = cut + 1 + rng() % (chain.size() - cut - 1);
    const Hashes before_cut(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(cut));
    stamp(make_remove_event_with_parent(w, before_cut, {chain[cut]}));
    const Hashes before_below(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(below));
    stamp(make_remove_event_with_parent(w, before_below, {chain[below]}));
    out.removed_ok += 2;
    if (rng() % 3 == 0) {
      stamp(make_remove_event_with_parent(w, before_below, {chain[below]}));
      ++out.removed_not_found;
    }
    if (rng() % 4 == 0) stamp(make_clear_event_with_dp_rank(w, r));
  }
  return out;
}

}  // namespace

TEST_CASE("replaying one log with several lanes gives the same outcome counters every run") {
  TempDir dir;
  const std::string log_path = dir.file("events.jsonl");
  std::uint64_t expected_ok = 0;
  std::uint64_t expected_not_found = 0;
  {
    Histories histories;
    for (WorkerId w = 1; w <= 16; ++w) {
      for (DpRank r = 0; r < 2; ++r) {
        StreamHistory history = cut_then_name_below(w, r, 150);
        expected_ok += history.removed_ok;
        expected_not_found += history.removed_not_found;
        histories[{w, r}] = std::move(history.events);
      }
    }
    EventLogWriter log(log_path);
    for (const RouterEvent* event : interleave(histories)) log.write(*event);
    REQUIRE(log.close());
  }
  ReplaySummary first;
  std::set<BlockKey> first_dump;
  for (int run = 0; run < 12; ++run) {
    CAPTURE(run);
    LaneIndexer indexer(run % 2 == 0 ? 2 : 4);
    ReplayOptions options;
    options.events_path = log_path;
    const ReplaySummary summary = replay_event_log(indexer, options);
    REQUIRE_MESSAGE(summary.ok(), summary.error);
    auto dump = indexer.dump_events();
    REQUIRE(dump.has_value());
    if (run == 0) {
      first = summary;
      first_dump = normal_form(*dump);
      // A block an earlier cut dropped is still one the stream stored: naming it is ok, naming
      // it again is not, whatever the lanes did to the node boundaries around it.
      const auto& removed = summary.applied.applied[static_cast<std::size_t>(EventKind::removed)];
      CHECK(removed[static_cast<std::size_t>(ApplyStatus::ok)] == expected_ok);
      CHECK(removed[static_cast<std::size_t>(ApplyStatus::block_not_found)] == expected_not_found);
      CHECK(expected_not_found > 0);
      continue;
    }
    CHECK(normal_form(*dump) == first_dump);
    // The summary's per-type result lines (its first line holds the timing).
    auto results = [](const ReplaySummary& s) {
      const std::string text = format_replay_summary(s);
      return text.substr(text.find('\n') + 1);
    };
    CHECK(results(summary) == results(first));
  }
}
