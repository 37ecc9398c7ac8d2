// Decoding vLLM's msgpack KVEventBatch in the encodings seen across versions.
#include <doctest/doctest.h>

#include <msgpack.hpp>

#include <cstring>
#include <string>

#include "bridge/vllm_event_batch.h"
#include "tests/bridge/fake_vllm_engine.h"

using namespace kvidx;
using namespace kvidx::bridge;
using namespace kvidx::testing;

namespace {

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

Decoded<VllmEventBatch> decode(const std::string& payload) { return decode_vllm_event_batch(bytes(payload)); }

std::vector<EngineEvent> three_kinds() {
  EngineStored stored;
  stored.hashes = {11, 0xFFFF'FFFF'FFFF'FFF0ULL};
  stored.parent = 7;
  stored.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  stored.block_size = 4;
  stored.lora_name = "adapter-a";
  stored.lora_id = 3;
  return {stored, EngineRemoved{{11}, std::string("GPU")}, EngineCleared{}};
}

void check_three_kinds(const VllmEventBatch& batch) {
  REQUIRE(batch.events.size() == 3);
  const auto& s = std::get<VllmBlockStored>(batch.events[0]);
  CHECK(s.block_hashes == std::vector<std::uint64_t>{11, 0xFFFF'FFFF'FFFF'FFF0ULL});
  CHECK(s.parent_block_hash == std::optional<std::uint64_t>(7));
  CHECK(s.token_ids.size() == 9);
  CHECK(s.block_size == 4);
  CHECK(s.lora_id == std::optional<std::int64_t>(3));
  CHECK(s.medium == std::optional<std::string>("GPU"));
  CHECK(s.lora_name == std::optional<std::string>("adapter-a"));
  CHECK(std::get<VllmBlockRemoved>(batch.events[1]).block_hashes == std::vector<std::uint64_t>{11});
  CHECK(std::holds_alternative<VllmAllBlocksCleared>(batch.events[2]));
}

}  // namespace

TEST_CASE("array_encoded_batch_with_all_three_event_kinds_decodes") {
  auto batch = decode(pack_batch(three_kinds(), 2));
  REQUIRE_MESSAGE(batch.ok(), batch.error().message());
  CHECK(batch.value().ts == doctest::Approx(1.5));
  CHECK(batch.value().data_parallel_rank == std::optional<DpRank>(2));
  check_three_kinds(batch.value());
}

TEST_CASE("map_encoded_events_decode_like_array_encoded_ones") {
  BatchEncoding enc;
  enc.events = EventEncoding::map;
  auto batch = decode(pack_batch(three_kinds(), 0, enc));
  REQUIRE_MESSAGE(batch.ok(), batch.error().message());
  check_three_kinds(batch.value());
}

TEST_CASE("negative_int_and_bytes_block_hashes_normalise_to_the_same_u64") {
  for (HashEncoding h : {HashEncoding::signed_wrap, HashEncoding::bytes32}) {
    BatchEncoding enc;
    enc.hashes = h;
    auto batch = decode(pack_batch(three_kinds(), 0, enc));
    REQUIRE_MESSAGE(batch.ok(), batch.error().message());
    check_three_kinds(batch.value());
  }
  const unsigned char short_bytes[] = {0x01, 0x02};
  CHECK(block_hash_from_bytes(std::as_bytes(std::span(short_bytes))) == 0x0102);
}

TEST_CASE("batch_without_rank_and_events_without_trailing_fields_decode") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_array(2);  // [ts, events]: no rank
  pk.pack(7);        // integer ts
  pk.pack_array(2);
  pk.pack_array(5);  // BlockStored up to block_size only
  pk.pack(std::string("BlockStored"));
  pk.pack_array(1);
  pk.pack_uint64(5);
  pk.pack_nil();
  pk.pack_array(4);
  for (int t = 0; t < 4; ++t) pk.pack(t);
  pk.pack(4);
  pk.pack_array(5);  // BlockRemoved with unknown trailing fields (group_idx, locality, ...)
  pk.pack(std::string("BlockRemoved"));
  pk.pack_array(1);
  pk.pack_uint64(5);
  pk.pack_nil();
  pk.pack(0);
  pk.pack(std::string("local"));
  auto batch = decode_vllm_event_batch(std::as_bytes(std::span<const char>(buf.data(), buf.size())));
  REQUIRE_MESSAGE(batch.ok(), batch.error().message());
  CHECK_FALSE(batch.value().data_parallel_rank.has_value());
  const auto& s = std::get<VllmBlockStored>(batch.value().events[0]);
  CHECK_FALSE(s.parent_block_hash.has_value());
  CHECK_FALSE(s.medium.has_value());
  CHECK_FALSE(s.lora_name.has_value());
  CHECK(std::get<VllmBlockRemoved>(batch.value().events[1]).block_hashes.size() == 1);
}

TEST_CASE("malformed_payloads_are_errors_not_exceptions") {
  CHECK_FALSE(decode("").ok());
  CHECK_FALSE(decode("\xc1garbage").ok());  // 0xc1 is never used in msgpack
  const std::string good = pack_batch(three_kinds());
  CHECK_FALSE(decode(good.substr(0, good.size() / 2)).ok());  // truncated
  CHECK_FALSE(decode(good + "x").ok());                       // trailing bytes

  auto one_event = [](auto&& pack_event) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(&buf);
    pk.pack_array(3);
    pk.pack(1.0);
    pk.pack_array(1);
    pack_event(pk);
    pk.pack(0);
    return std::string(buf.data(), buf.size());
  };
  auto unknown_tag = decode(one_event([](auto& pk) {
    pk.pack_array(1);
    pk.pack(std::string("BlockMoved"));
  }));
  REQUIRE_FALSE(unknown_tag.ok());
  CHECK(unknown_tag.error().message().find("BlockMoved") != std::string::npos);

  auto token_out_of_range = decode(one_event([](auto& pk) {
    pk.pack_array(5);
    pk.pack(std::string("BlockStored"));
    pk.pack_array(1);
    pk.pack(1);
    pk.pack_nil();
    pk.pack_array(1);
    pk.pack(std::int64_t{-1});
    pk.pack(1);
  }));
  REQUIRE_FALSE(token_out_of_range.ok());
  CHECK(token_out_of_range.error().field == "events[0][3][0]");

  auto missing_block_size = decode(one_event([](auto& pk) {
    pk.pack_array(4);
    pk.pack(std::string("BlockStored"));
    pk.pack_array(0);
    pk.pack_nil();
    pk.pack_array(0);
  }));
  REQUIRE_FALSE(missing_block_size.ok());
  CHECK(missing_block_size.error().field == "events[0][4]");

  auto hash_as_string = decode(one_event([](auto& pk) {
    pk.pack_map(2);
    pk.pack(std::string("type"));
    pk.pack(std::string("BlockRemoved"));
    pk.pack(std::string("block_hashes"));
    pk.pack_array(1);
    pk.pack(std::string("abc"));
  }));
  REQUIRE_FALSE(hash_as_string.ok());
  CHECK(hash_as_string.error().field == "events[0].block_hashes[0]");

  VllmDecodeLimits tight;
  tight.max_array_length = 4;
  CHECK_FALSE(decode_vllm_event_batch(bytes(good), tight).ok());  // 9 token ids > 4
}
