// The replay issue's acceptance: a generated Mooncake log of at least a million events, replayed
// through the lanes from a file, scores exactly as the reference model; its snapshot replays to an
// identical index.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_writer.h"
#include "replay/mooncake_workload.h"
#include "replay/offline_replay.h"
#include "tests/support/child_process.h"
#include "tests/support/event_builders.h"
#include "tests/support/event_histories.h"
#include "tests/support/reference_index.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

// KVIDX_REPLAY_COPIES scales the fleet (and so the event count) down for sanitizer builds.
std::size_t fleet_copies() {
  if (const char* env = std::getenv("KVIDX_REPLAY_COPIES")) return std::max(1, std::atoi(env));
  return 9;
}

std::map<WorkerWithDpRank, std::uint32_t> positive(const OverlapScores& scores) {
  std::map<WorkerWithDpRank, std::uint32_t> out;
  for (const auto& [stream, score] : scores.scores) {
    if (score > 0) out[stream] = score;
  }
  return out;
}

}  // namespace

TEST_CASE("replaying a generated Mooncake log of a million events scores as the reference model") {
  std::vector<MooncakeRequest> trace;
  std::string error;
  REQUIRE_MESSAGE(
      load_mooncake_trace(std::string(KVIDX_SOURCE_DIR) + "/tests/data/traces/mooncake_conversation_trace.jsonl", trace,
                          error),
      error);
  WorkloadOptions options;
  options.workers = 32;
  options.copies = fleet_copies();
  options.dp_ranks = 2;
  options.capacity_blocks = 384;
  options.store_chunk_blocks = 2;

  TempDir dir;
  const std::string log_path = dir.file("mooncake.jsonl");
  ReferenceIndex model;
  std::vector<std::vector<LocalBlockHash>> queries;
  std::uint64_t events = 0;
  {
    EventLogWriter log(log_path);
    simulate_workload(trace, options,
                      WorkloadSink{[&](RouterEvent&& event) {
                                     model.apply(event);
                                     log.write(event);
                                     ++events;
                                   },
                                   [&](const RoutedRequest& request) {
                                     if (queries.size() < 20000) queries.push_back(request.local_hashes);
                                   }});
    REQUIRE(log.close());
  }
  if (options.copies == 9) CHECK(events >= 1'000'000);
  MESSAGE("generated ", events, " events");

  LaneIndexer indexer(2);
  ReplayOptions replay;
  replay.events_path = log_path;
  const ReplaySummary summary = replay_event_log(indexer, replay);
  REQUIRE_MESSAGE(summary.ok(), summary.error);
  CHECK(summary.read.events == events);
  CHECK(summary.read.bad_lines == 0);
  CHECK(summary.applied.applied_total() == events);
  CHECK(summary.applied.applied_with(ApplyStatus::ok) == events);

  std::uint64_t mismatches = 0;
  for (const auto& query : queries) {
    if (positive(indexer.find_matches(query)) != model.scores(query)) ++mismatches;
  }
  CHECK(mismatches == 0);
  for (const auto& [stream, blocks] : indexer.tree().stream_block_counts()) CHECK(blocks == model.block_count(stream));
  CHECK(indexer.shard_sizes().block_count == model.total_blocks());

  // The snapshot (Stored events only) replays to the same index.
  auto dump = indexer.dump_events();
  REQUIRE(dump.has_value());
  {
    EventLogWriter snapshot(dir.file("snapshot.jsonl.gz"));
    for (const auto& event : *dump) snapshot.write(event);
    REQUIRE(snapshot.close());
  }
  LaneIndexer restored(2);
  replay.events_path = dir.file("snapshot.jsonl.gz");
  REQUIRE(replay_event_log(restored, replay).ok());
  auto restored_dump = restored.dump_events();
  REQUIRE(restored_dump.has_value());
  CHECK(normal_form(*restored_dump) == normal_form(*dump));
  CHECK(normal_form(*dump).size() == model.total_blocks());
  std::uint64_t restored_mismatches = 0;
  for (std::size_t i = 0; i < queries.size(); i += 7) {
    if (positive(restored.find_matches(queries[i])) != model.scores(queries[i])) ++restored_mismatches;
  }
  CHECK(restored_mismatches == 0);
}

TEST_CASE("replay decodes on the applying thread unless cores are left beside the lanes, reader and applier") {
  CHECK(default_decode_threads(2, false, 2) == 0);  // this project's CI box: every core already busy
  CHECK(default_decode_threads(2, false, 4) == 0);
  CHECK(default_decode_threads(2, false, 5) == 1);
  CHECK(default_decode_threads(1, false, 8) == 5);
  CHECK(default_decode_threads(2, false, 64) == 8);  // at most 8
  CHECK(default_decode_threads(4, false, 0) == 0);   // core count unknown
  // gzip: inflating moves to the reading thread, which only runs with decode threads.
  CHECK(default_decode_threads(2, true, 2) == 1);
  CHECK(default_decode_threads(2, true, 10) == 6);
}
