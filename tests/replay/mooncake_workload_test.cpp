#include <doctest/doctest.h>

#include "libindexer/tree/radix_tree.h"
#include "replay/mooncake_workload.h"
#include "tests/support/reference_index.h"

using namespace kvidx;

namespace {

std::vector<MooncakeRequest> load_trace(const char* name, std::size_t max_requests) {
  std::vector<MooncakeRequest> trace;
  std::string error;
  REQUIRE_MESSAGE(load_mooncake_trace(std::string(KVIDX_SOURCE_DIR) + "/tests/data/traces/" + name, trace, error),
                  error);
  if (trace.size() > max_requests) trace.resize(max_requests);
  return trace;
}

}  // namespace

TEST_CASE("the Mooncake simulator only removes blocks its workers hold and stays within capacity") {
  const auto trace = load_trace("mooncake_conversation_trace.jsonl", 3000);
  WorkloadOptions options;
  options.workers = 4;
  options.dp_ranks = 2;
  options.capacity_blocks = 128;
  testing::ReferenceIndex model;
  std::uint64_t removed_unknown = 0;
  std::map<WorkerWithDpRank, std::uint64_t> next_id;
  const auto stats = simulate_workload(
      trace, options,
      WorkloadSink{[&](RouterEvent&& event) {
                     CHECK(event.event.event_id == next_id[event.stream()]++);  // dense ids per stream
                     if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
                       const auto before = model.block_count(event.stream());
                       model.apply(event);
                       // every hash named was held, so exactly that many blocks disappear
                       if (before - model.block_count(event.stream()) != removed->block_hashes.size())
                         ++removed_unknown;
                       // a worker evicts right after storing, down to its capacity
                       CHECK(model.block_count(event.stream()) <= options.capacity_blocks);
                     } else {
                       model.apply(event);
                     }
                   },
                   nullptr});
  CHECK(removed_unknown == 0);
  CHECK(stats.requests == 3000);
  CHECK(stats.removed_events > 0);
  CHECK(stats.stored_blocks - stats.removed_blocks == model.total_blocks());
}

TEST_CASE("the tree scores every routed Mooncake request exactly as the reference model") {
  const auto trace = load_trace("mooncake_conversation_trace.jsonl", 4000);
  WorkloadOptions options;
  options.workers = 8;
  options.copies = 2;
  options.dp_ranks = 2;
  options.capacity_blocks = 256;
  options.store_chunk_blocks = 4;
  ConcurrentRadixTree tree;
  DirectLookup lookups;
  testing::ReferenceIndex model;
  std::uint64_t compared = 0;
  std::uint64_t mismatches = 0;
  simulate_workload(trace, options,
                    WorkloadSink{[&](RouterEvent&& event) {
                                   model.apply(event);
                                   CHECK(tree.apply_event(lookups, event).ok());
                                 },
                                 [&](const RoutedRequest& request) {
                                   const auto expected = model.scores(request.local_hashes);
                                   const auto got = tree.find_matches(request.local_hashes, false);
                                   std::map<WorkerWithDpRank, std::uint32_t> actual;
                                   for (const auto& [stream, score] : got.scores) {
                                     if (score > 0) actual[stream] = score;
                                   }
                                   ++compared;
                                   if (actual != expected) ++mismatches;
                                 }});
  CHECK(compared == 8000);
  CHECK(mismatches == 0);
  std::size_t tree_blocks = 0;
  for (const auto& [stream, blocks] : tree.stream_block_counts()) {
    CHECK(blocks == model.block_count(stream));
    tree_blocks += blocks;
  }
  CHECK(tree_blocks == model.total_blocks());
}
