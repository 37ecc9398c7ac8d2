// vLLM BlockStored extra_keys (multimodal hashes per block) and Eagle bigram token ids: decoding
// from msgpack built here key by key, and their effect on tokens_hash after conversion. Expected
// hashes are XXH3-64 (seed 1337) over byte strings written out by hand.
#include <doctest/doctest.h>
#include <xxhash.h>

#include <msgpack.hpp>

#include <functional>
#include <string>
#include <vector>

#include "bridge/vllm_event_batch.h"
#include "bridge/vllm_event_converter.h"
#include "bridge/vllm_extra_keys.h"

using namespace kvidx;
using namespace kvidx::bridge;

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// 64 hex digits whose first 16 are `head` (vLLM's mm identifiers are such digests).
std::string digest(const std::string& head) { return head + std::string(64 - head.size(), 'e'); }

// One batch holding one array-encoded BlockStored: hashes 100.., tokens, block size 2, then the
// extra_keys field written by `extra` (nothing written: no extra_keys field at all).
std::string stored_batch(const std::function<void(Packer&)>& tokens, const std::function<void(Packer&)>& extra,
                         std::uint32_t blocks) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_array(2);
  pk.pack(1.0);
  pk.pack_array(1);
  pk.pack_array(extra ? 9 : 8);
  pk.pack(std::string("BlockStored"));
  pk.pack_array(blocks);
  for (std::uint32_t i = 0; i < blocks; ++i) pk.pack(std::uint64_t{100 + i});
  pk.pack_nil();  // parent
  tokens(pk);
  pk.pack(2);     // block size
  pk.pack_nil();  // lora_id
  pk.pack_nil();  // medium
  pk.pack_nil();  // lora_name
  if (extra) extra(pk);
  return std::string(buf.data(), buf.size());
}

std::function<void(Packer&)> flat_tokens(std::vector<std::uint32_t> tokens) {
  return [tokens](Packer& pk) { pk.pack(tokens); };
}

VllmBlockStored decode_stored(const std::string& payload) {
  auto batch = decode_vllm_event_batch(std::as_bytes(std::span<const char>(payload.data(), payload.size())));
  REQUIRE_MESSAGE(batch.ok(), batch.error().message());
  REQUIRE(batch.value().events.size() == 1);
  return std::get<VllmBlockStored>(batch.value().events[0]);
}

std::uint64_t xxh3(const std::vector<unsigned char>& bytes) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), 1337);
}

ConversionConfig config(bool eagle = false) {
  ConversionConfig c;
  c.worker_id = 5;
  c.block_size = 2;
  c.eagle = eagle;
  return c;
}

KvCacheStoreData convert_one(VllmEventConverter& converter, const VllmBlockStored& stored) {
  VllmEventBatch batch;
  batch.events.push_back(stored);
  std::vector<RouterEvent> out;
  converter.convert(batch, out);
  REQUIRE(out.size() == 1);
  return std::get<KvCacheStoreData>(out[0].event.data);
}

}  // namespace

TEST_CASE("mm_hash_of_an_identifier_is_its_first_16_hex_digits_big_endian") {
  CHECK(mm_hash_from_identifier(digest("0123456789abcdef")) == std::optional<std::uint64_t>(0x0123456789ABCDEFULL));
  CHECK(mm_hash_from_identifier(digest("FEDCBA9876543210")) == std::optional<std::uint64_t>(0xFEDCBA9876543210ULL));
  CHECK_FALSE(mm_hash_from_identifier(digest("0123456789abcdef").substr(1)).has_value());  // 63 digits
  CHECK_FALSE(mm_hash_from_identifier(digest("0123456789abcdeg")).has_value());            // not hex
  CHECK_FALSE(mm_hash_from_identifier("my-lora").has_value());
}

TEST_CASE("extra_keys_give_each_block_its_mm_hashes_and_skip_lora_salt_and_embedding_keys") {
  const auto stored = decode_stored(stored_batch(
      flat_tokens({1, 2, 3, 4, 5, 6}),
      [](Packer& pk) {
        pk.pack_array(3);
        pk.pack_nil();     // block 0: text only
        pk.pack_array(2);  // block 1: an image digest and the LoRA name
        pk.pack(digest("00000000000000aa"));
        pk.pack(std::string("my-lora"));
        pk.pack_array(
            4);  // block 2: [identifier, offset] (vLLM >= 0.19), a prompt-embeds hash, an int, a typed LoRA key
        pk.pack_array(2);
        pk.pack(digest("00000000000000bb"));
        pk.pack(3);
        pk.pack_bin(2);
        pk.pack_bin_body("\x01\x02", 2);
        pk.pack(7);
        pk.pack_map(2);
        pk.pack(std::string("type"));
        pk.pack(std::string("LoRAKey"));
        pk.pack(std::string("name"));
        pk.pack(std::string("my-lora"));
      },
      3));
  CHECK_FALSE(stored.extra_keys_issue.has_value());
  REQUIRE(stored.block_mm_hashes.size() == 3);
  CHECK(stored.block_mm_hashes[0].empty());
  CHECK(stored.block_mm_hashes[1] == std::vector<std::uint64_t>{0xAA});
  CHECK(stored.block_mm_hashes[2] == std::vector<std::uint64_t>{0xBB});
}

TEST_CASE("typed_multimodal_keys_and_scoped_identifiers_are_read_in_map_encoded_events") {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_array(2);
  pk.pack(1.0);
  pk.pack_array(1);
  pk.pack_map(5);
  pk.pack(std::string("type"));
  pk.pack(std::string("BlockStored"));
  pk.pack(std::string("block_hashes"));
  pk.pack(std::vector<std::uint64_t>{100});
  pk.pack(std::string("token_ids"));
  pk.pack(std::vector<std::uint32_t>{1, 2});
  pk.pack(std::string("block_size"));
  pk.pack(2);
  pk.pack(std::string("extra_keys"));
  pk.pack_array(1);
  pk.pack_array(2);
  pk.pack_map(3);  // typed MultiModalKey with a LoRA-scoped identifier
  pk.pack(std::string("type"));
  pk.pack(std::string("MultiModalKey"));
  pk.pack(std::string("modality"));
  pk.pack(std::string("image"));
  pk.pack(std::string("hash"));
  pk.pack("lora1:" + digest("0000000000000c0d"));
  pk.pack_array(2);  // untyped pair with a scoped identifier
  pk.pack("lora1:" + digest("0000000000000001"));
  pk.pack(0);
  const auto stored = decode_stored(std::string(buf.data(), buf.size()));
  CHECK_FALSE(stored.extra_keys_issue.has_value());
  REQUIRE(stored.block_mm_hashes.size() == 1);
  CHECK(stored.block_mm_hashes[0] == std::vector<std::uint64_t>{0xC0D, 1});
}

TEST_CASE("an_unknown_extra_keys_shape_is_recorded_on_the_event_not_a_decode_error") {
  // Block 1's second key is a map of an unknown type.
  auto stored = decode_stored(stored_batch(
      flat_tokens({1, 2, 3, 4, 5, 6}),
      [](Packer& pk) {
        pk.pack_array(3);
        pk.pack_array(1);
        pk.pack(digest("0000000000000001"));
        pk.pack_array(2);
        pk.pack(digest("0000000000000002"));
        pk.pack_map(1);
        pk.pack(std::string("type"));
        pk.pack(std::string("FutureKey"));
        pk.pack_nil();
      },
      3));
  REQUIRE(stored.extra_keys_issue.has_value());
  CHECK(stored.extra_keys_issue->block == 1);
  CHECK(stored.extra_keys_issue->reason.find("events[0][8][1][1]") != std::string::npos);
  CHECK(stored.extra_keys_issue->reason.find("FutureKey") != std::string::npos);
  CHECK(stored.block_mm_hashes.size() == 1);  // only the blocks before the issue

  // A multimodal pair whose identifier is not a digest, and extra_keys that is not an array.
  stored = decode_stored(stored_batch(
      flat_tokens({1, 2}),
      [](Packer& pk) {
        pk.pack_array(1);
        pk.pack_array(1);
        pk.pack_array(2);
        pk.pack(std::string("not-a-digest"));
        pk.pack(0);
      },
      1));
  REQUIRE(stored.extra_keys_issue.has_value());
  CHECK(stored.extra_keys_issue->block == 0);
  CHECK(stored.extra_keys_issue->reason.find("not a 64-hex-digit digest") != std::string::npos);
  stored = decode_stored(stored_batch(
      flat_tokens({1, 2}), [](Packer& pk) { pk.pack(std::string("oops")); }, 1));
  REQUIRE(stored.extra_keys_issue.has_value());
  CHECK(stored.extra_keys_issue->block == 0);
}

TEST_CASE("eagle_bigram_token_ids_are_flattened_and_flagged") {
  const auto stored = decode_stored(stored_batch(
      [](Packer& pk) {
        pk.pack_array(4);
        for (std::uint32_t t = 10; t < 14; ++t) {
          pk.pack_array(2);
          pk.pack(t);
          pk.pack(t + 1);
        }
      },
      {}, 2));
  CHECK(stored.bigram_token_ids);
  CHECK(stored.token_ids == std::vector<std::uint32_t>{10, 11, 12, 13, 14});

  const std::string mixed = stored_batch(
      [](Packer& pk) {
        pk.pack_array(2);
        pk.pack_array(2);
        pk.pack(1);
        pk.pack(2);
        pk.pack(3);  // a plain id after a bigram
      },
      {}, 1);
  auto batch = decode_vllm_event_batch(std::as_bytes(std::span<const char>(mixed.data(), mixed.size())));
  REQUIRE_FALSE(batch.ok());
  CHECK(batch.error().field == "events[0][3][1]");
}

TEST_CASE("converted_mm_blocks_hash_their_sorted_mm_hashes_after_the_tokens") {
  VllmEventConverter converter(config());
  VllmBlockStored stored;
  stored.block_hashes = {100, 200};
  stored.token_ids = {1, 2, 3, 4};
  stored.block_size = 2;
  stored.block_mm_hashes = {{}, {0x0102030405060708ULL, 3}};
  const auto data = convert_one(converter, stored);
  REQUIRE(data.blocks.size() == 2);
  CHECK(data.blocks[0].tokens_hash.value == xxh3({1, 0, 0, 0, 2, 0, 0, 0}));
  CHECK(data.blocks[1].tokens_hash.value == xxh3({3, 0, 0, 0, 4, 0, 0, 0,  //
                                                  3, 0, 0, 0, 0, 0, 0, 0,  //
                                                  8, 7, 6, 5, 4, 3, 2, 1}));
  CHECK(data.mm_extra_info(0) == nullptr);
  REQUIRE(data.mm_extra_info(1) != nullptr);
  CHECK(*data.mm_extra_info(1) == R"({"mm_objects":[{"mm_hash":72623859790382856,"offsets":[]},)"
                                  R"({"mm_hash":3,"offsets":[]}]})");
  CHECK(converter.stats().mm_blocks == 1);
}

TEST_CASE("unreadable_extra_keys_keep_only_the_blocks_before_the_issue_and_are_counted") {
  VllmEventConverter converter(config());
  VllmBlockStored stored;
  stored.block_hashes = {100, 200, 300};
  stored.token_ids = {1, 2, 3, 4, 5, 6};
  stored.block_size = 2;
  stored.block_mm_hashes = {{9}};
  stored.extra_keys_issue = ExtraKeysIssue{1, "events[0][8][1][0]: unknown typed key 'FutureKey'"};
  const auto data = convert_one(converter, stored);
  REQUIRE(data.blocks.size() == 1);
  CHECK(data.blocks[0].block_hash.value == 100);
  CHECK(data.blocks[0].tokens_hash.value == xxh3({1, 0, 0, 0, 2, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(converter.stats().extra_keys_unreadable == 1);

  // An issue in the first block leaves nothing to store: the event is dropped, no id is used.
  stored.extra_keys_issue = ExtraKeysIssue{0, "events[0][8]: expected an array of per-block keys or nil"};
  VllmEventBatch batch;
  batch.events.push_back(stored);
  std::vector<RouterEvent> out;
  converter.convert(batch, out);
  CHECK(out.empty());
  CHECK(converter.stats().extra_keys_unreadable == 2);
  CHECK(converter.stats().empty_stores_dropped == 1);
}

TEST_CASE("eagle_conversion_hashes_overlapping_windows_and_needs_the_next_blocks_first_token") {
  // --eagle with flat token ids (vLLM): 2 blocks of tokens, but block 1 has no lookahead token.
  VllmEventConverter eagle(config(true));
  VllmBlockStored stored;
  stored.block_hashes = {100, 200};
  stored.token_ids = {1, 2, 3, 4};
  stored.block_size = 2;
  auto data = convert_one(eagle, stored);
  REQUIRE(data.blocks.size() == 1);
  CHECK(data.blocks[0].tokens_hash.value == xxh3({1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}));
  CHECK(eagle.stats().block_count_mismatches == 1);

  // Bigram token ids (flattened to 5 tokens) make a converter without --eagle hash Eagle windows.
  VllmEventConverter plain(config(false));
  stored.token_ids = {1, 2, 3, 4, 5};
  stored.bigram_token_ids = true;
  data = convert_one(plain, stored);
  REQUIRE(data.blocks.size() == 2);
  CHECK(data.blocks[0].tokens_hash.value == xxh3({1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}));
  CHECK(data.blocks[1].tokens_hash.value == xxh3({3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0}));
  CHECK(plain.stats().eagle_bigram_events == 1);
  CHECK(plain.stats().partial_tokens_dropped == 0);
}
