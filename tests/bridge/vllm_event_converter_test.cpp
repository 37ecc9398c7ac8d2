// Converting vLLM events into RouterEvents: Dynamo-compatible tokens_hash, LoRA salt, event ids.
#include <doctest/doctest.h>

#include <numeric>

#include "bridge/vllm_event_converter.h"
#include "libindexer/hashing.h"

using namespace kvidx;
using namespace kvidx::bridge;

namespace {

ConversionConfig config(WorkerId worker, DpRank default_rank, std::uint32_t block_size) {
  ConversionConfig c;
  c.worker_id = worker;
  c.default_dp_rank = default_rank;
  c.block_size = block_size;
  return c;
}

VllmEventBatch batch_of(std::vector<VllmEvent> events, std::optional<DpRank> rank = std::nullopt) {
  VllmEventBatch b;
  b.events = std::move(events);
  b.data_parallel_rank = rank;
  return b;
}

std::vector<std::uint32_t> tokens(std::uint32_t from, std::uint32_t to) {
  std::vector<std::uint32_t> out(to - from + 1);
  std::iota(out.begin(), out.end(), from);
  return out;
}

}  // namespace

TEST_CASE("tokens_hash_is_the_dynamo_local_hash_of_each_full_block_and_partial_blocks_are_dropped") {
  VllmEventConverter converter(config(9, 0, 16));
  VllmBlockStored stored;
  stored.block_hashes = {100, 200, 300};
  stored.parent_block_hash = 50;
  stored.token_ids = tokens(1, 40);  // two full blocks of 16 and 8 tokens left over
  stored.block_size = 16;
  std::vector<RouterEvent> out;
  converter.convert(batch_of({stored}), out);
  REQUIRE(out.size() == 1);
  const auto& data = std::get<KvCacheStoreData>(out[0].event.data);
  CHECK(out[0].worker_id == 9);
  CHECK(data.parent_hash == std::optional(ExternalSequenceBlockHash{50}));
  REQUIRE(data.blocks.size() == 2);
  // Known vector from the wire-format spec (tokens 1..32, block size 16).
  CHECK(data.blocks[0].tokens_hash.value == 16863443419780771464ULL);
  CHECK(data.blocks[1].tokens_hash.value == 2287610619914608821ULL);
  CHECK(data.blocks[0].block_hash.value == 100);
  CHECK(data.blocks[1].block_hash.value == 200);
  CHECK(converter.stats().partial_tokens_dropped == 8);
  CHECK(converter.stats().block_count_mismatches == 1);
  CHECK_FALSE(out[0].storage_tier.has_value());
}

TEST_CASE("lora_name_salts_tokens_hash_and_lora_id_alone_cannot") {
  VllmEventConverter converter(config(1, 0, 4));
  VllmBlockStored stored;
  stored.block_hashes = {1};
  stored.token_ids = {5, 6, 7, 8};
  stored.block_size = 4;
  stored.lora_name = "sql-adapter";
  std::vector<RouterEvent> out;
  converter.convert(batch_of({stored}), out);
  const std::uint32_t block[] = {5, 6, 7, 8};
  const auto salted = compute_block_hash(block, block_hash_seed("sql-adapter"));
  CHECK(std::get<KvCacheStoreData>(out[0].event.data).blocks[0].tokens_hash == salted);
  CHECK(salted != compute_block_hash(block));

  stored.lora_name.reset();
  stored.lora_id = 4;
  converter.convert(batch_of({stored}), out);
  CHECK(std::get<KvCacheStoreData>(out[1].event.data).blocks[0].tokens_hash == compute_block_hash(block));
  CHECK(converter.stats().lora_id_without_name == 1);
}

TEST_CASE("event_ids_are_contiguous_per_rank_and_lost_batches_skip_ids") {
  VllmEventConverter converter(config(1, 3, 4));
  std::vector<RouterEvent> out;
  converter.convert(batch_of({VllmAllBlocksCleared{}, VllmBlockRemoved{{1}, std::nullopt}}), out);  // rank 3
  converter.convert(batch_of({VllmAllBlocksCleared{}}, DpRank{1}), out);
  converter.convert(batch_of({VllmBlockRemoved{{2}, std::string("CPU")}}), out);
  REQUIRE(out.size() == 4);
  CHECK(out[0].event.dp_rank == 3);
  CHECK(out[0].event.event_id == 0);
  CHECK(out[1].event.event_id == 1);
  CHECK(out[2].event.dp_rank == 1);
  CHECK(out[2].event.event_id == 0);
  CHECK(out[3].event.event_id == 2);
  CHECK(out[3].storage_tier == std::optional(StorageTier::host_pinned));

  converter.skip_event_ids(5, 0);  // every known rank
  converter.convert(batch_of({VllmAllBlocksCleared{}}), out);
  converter.convert(batch_of({VllmAllBlocksCleared{}}, DpRank{1}), out);
  CHECK(out[4].event.event_id == 3 + 5);
  CHECK(out[5].event.event_id == 1 + 5);
  CHECK(converter.make_cleared(3).event.event_id == 9);
}

TEST_CASE("a_stored_event_with_another_block_size_or_no_full_block_is_dropped") {
  VllmEventConverter converter(config(1, 0, 4));
  VllmBlockStored wrong_size;
  wrong_size.block_hashes = {1};
  wrong_size.token_ids = tokens(1, 8);
  wrong_size.block_size = 8;
  VllmBlockStored partial;
  partial.block_hashes = {1};
  partial.token_ids = {1, 2};
  partial.block_size = 4;
  std::vector<RouterEvent> out;
  converter.convert(batch_of({wrong_size, partial, VllmAllBlocksCleared{}}), out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].event.event_id == 0);  // dropped events take no id
  CHECK(converter.stats().block_size_mismatches == 1);
  CHECK(converter.stats().empty_stores_dropped == 1);
}

TEST_CASE("medium_maps_to_storage_tier") {
  CHECK_FALSE(storage_tier_of_medium(std::nullopt).has_value());
  CHECK_FALSE(storage_tier_of_medium(std::string("GPU")).has_value());
  CHECK(storage_tier_of_medium(std::string("cpu")) == std::optional(StorageTier::host_pinned));
  CHECK(storage_tier_of_medium(std::string("DISK")) == std::optional(StorageTier::disk));
  CHECK(storage_tier_of_medium(std::string("lmcache")) == std::optional(StorageTier::external));
}
