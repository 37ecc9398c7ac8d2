#include <doctest/doctest.h>

#include <numeric>
#include <string_view>

#include "libindexer/hashing.h"

using namespace kvidx;

TEST_CASE("block hashes of tokens 1..32 with block size 16 match the spec vectors") {
  std::vector<std::uint32_t> tokens(32);
  std::iota(tokens.begin(), tokens.end(), 1u);
  const auto locals = compute_block_hashes(tokens, 16);
  REQUIRE(locals.size() == 2);
  CHECK(locals[0].value == 16863443419780771464ULL);
  CHECK(locals[1].value == 2287610619914608821ULL);
  const auto seq = compute_sequence_hashes(locals);
  REQUIRE(seq.size() == 2);
  CHECK(seq[0].value == 16863443419780771464ULL);
  CHECK(seq[1].value == 12466389667045779788ULL);
}

TEST_CASE("sequence hashes of local hashes 1, 2, 3 match the spec vector") {
  const std::vector<LocalBlockHash> locals{{1}, {2}, {3}};
  const auto seq = compute_sequence_hashes(locals);
  REQUIRE(seq.size() == 3);
  CHECK(seq[0].value == 1);
  CHECK(seq[1].value == 16740963408272063728ULL);
  CHECK(seq[2].value == 5417695437591212399ULL);
}

TEST_CASE("a chain continued from a parent equals the chain computed in one go") {
  const std::vector<LocalBlockHash> all{{1}, {2}, {3}};
  const auto whole = compute_sequence_hashes(all);
  const std::vector<LocalBlockHash> tail{{2}, {3}};
  const auto continued = compute_sequence_hashes(tail, whole[0]);
  CHECK(continued[0] == whole[1]);
  CHECK(continued[1] == whole[2]);
}

TEST_CASE("the reference compute_block_hash vector: XXH3 of 'test data' with seed 1337") {
  constexpr std::string_view text = "test data";
  CHECK(xxh3_64(std::as_bytes(std::span{text.data(), text.size()}), 1337) == 13226331709069118873ULL);
}

TEST_CASE("a trailing partial block is not hashed and block size zero hashes nothing") {
  std::vector<std::uint32_t> tokens(40, 7);
  CHECK(compute_block_hashes(tokens, 16).size() == 2);
  CHECK(compute_block_hashes(tokens, 0).empty());
}

TEST_CASE("LoRA name and cache namespace change the seed, empty strings count as absent") {
  CHECK(block_hash_seed() == kBlockHashSeed);
  CHECK(block_hash_seed("", "") == kBlockHashSeed);
  const auto lora = block_hash_seed("my-lora");
  CHECK(lora != kBlockHashSeed);
  CHECK(block_hash_seed("my-lora", "ns") != lora);
  std::vector<std::uint32_t> tokens(16, 3);
  CHECK(compute_block_hash(tokens, lora) != compute_block_hash(tokens));
}
