// vLLM's `medium` end to end (issue 17 §2): a fake engine publishes GPU, CPU, disk and LMCache
// events over ZMQ, `kvidx serve --zmq`'s in-process bridge converts them, and the service indexes
// each in its tier's tree (README, "vLLM / SGLang bridge": the medium table).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "bridge/in_process_bridges.h"
#include "libbus/service.h"
#include "libindexer/hashing.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/bridge/fake_vllm_engine.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::bridge;
using namespace kvidx::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kBlockSize = 4;

EngineStored stored_on(std::string medium, std::vector<std::uint64_t> hashes, std::vector<std::uint32_t> toks) {
  EngineStored s;
  s.hashes = std::move(hashes);
  s.tokens = std::move(toks);
  s.block_size = kBlockSize;
  s.medium = std::move(medium);
  return s;
}

EngineRemoved removed_on(std::string medium, std::vector<std::uint64_t> hashes) {
  EngineRemoved r;
  r.hashes = std::move(hashes);
  r.medium = std::move(medium);
  return r;
}

std::optional<std::uint32_t> score_in(const TieredOverlapScores& scores, StorageTier tier, WorkerId worker) {
  const auto& map = scores.scores_of(tier);
  const auto it = map.find(WorkerWithDpRank{worker, 0});
  if (it == map.end()) return std::nullopt;
  return it->second;
}

}  // namespace

TEST_SUITE("integration") {
TEST_CASE("vllm_mediums_reach_their_storage_tiers_through_the_in_process_bridge") {
  NatsServer server;
  bus::ServiceConfig config;
  config.nats_url = server.url();
  config.lanes = 2;
  config.snapshot_interval = 0ms;
  bus::KvidxService service(config);
  REQUIRE(service.start().ok());

  FakeVllmEngine engine(false);
  ZmqBridgeConfig source;
  source.endpoint = engine.endpoint();
  source.conversion.worker_id = 5;
  source.conversion.block_size = kBlockSize;
  InProcessBridges bridges(service, {source});
  REQUIRE(bridges.start().ok());
  engine.wait_for_subscriber();

  // Blocks of tokens 1..8 on GPU, offloaded to CPU (vLLM's OffloadingConnector says "CPU"), then
  // evicted from GPU; tokens 101..108 on disk; tokens 201..204 in LMCache (no tier of its own: external).
  const std::vector<std::vector<EngineEvent>> batches{
      {stored_on("GPU", {11, 12}, tokens(1, 8))},
      {stored_on("CPU", {11, 12}, tokens(1, 8))},
      {removed_on("GPU", {11, 12})},
      {stored_on("DISK", {21, 22}, tokens(101, 8))},
      {stored_on("LMCache", {31}, tokens(201, 4))},
  };
  for (std::size_t seq = 0; seq < batches.size(); ++seq) engine.publish(seq, pack_batch(batches[seq]));
  REQUIRE(wait_until([&] { return bridges.stats()[0].batches_delivered == batches.size(); }));
  bridges.stop();
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  CHECK(bridges.stats()[0].sink_failures == 0);

  const auto offloaded = service.indexer().find_tiered_matches(compute_block_hashes(tokens(1, 8), kBlockSize));
  CHECK(offloaded.device.scores.empty());
  CHECK(score_in(offloaded, StorageTier::host_pinned, 5) == 2u);
  const auto on_disk = service.indexer().find_tiered_matches(compute_block_hashes(tokens(101, 8), kBlockSize));
  CHECK(score_in(on_disk, StorageTier::disk, 5) == 2u);
  CHECK(score_in(on_disk, StorageTier::host_pinned, 5) == std::nullopt);
  const auto external = service.indexer().find_tiered_matches(compute_block_hashes(tokens(201, 4), kBlockSize));
  CHECK(score_in(external, StorageTier::external, 5) == 1u);
  const ShardSizes sizes = service.indexer().shard_sizes();
  CHECK(sizes.blocks_by_tier == std::array<std::size_t, kStorageTierCount>{0, 2, 2, 1});
  // Every event, whatever its medium, went through the one stream's sequence: no gap, no duplicate.
  CHECK(service.stats().gaps == 0);
  CHECK(service.stats().duplicates == 0);
  CHECK(service.stats().events_applied == batches.size());
}
}  // TEST_SUITE("integration")
