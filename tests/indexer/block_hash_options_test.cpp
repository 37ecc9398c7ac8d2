// Eagle windows and multimodal extra keys in the local block hash (BlockHashOptions). Expected
// values are XXH3-64 computed here over byte strings written out by hand, never through the
// function under test.
#include <doctest/doctest.h>
#include <xxhash.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "libindexer/hashing.h"

using namespace kvidx;

namespace {

std::uint64_t xxh3(const std::vector<unsigned char>& bytes, std::uint64_t seed = 1337) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

}  // namespace

TEST_CASE("eagle_windows_are_block_size_plus_one_tokens_with_stride_block_size") {
  const std::vector<std::uint32_t> tokens{1, 2, 3, 4, 5};
  const BlockHashOptions eagle{kBlockHashSeed, true, {}};
  const auto hashes = compute_block_hashes(tokens, 2, eagle);
  REQUIRE(hashes.size() == 2);
  // Block 0: tokens 1, 2 plus the next block's first token 3.
  CHECK(hashes[0].value == xxh3({1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}));
  // Block 1: tokens 3, 4 plus 5 (the windows overlap by one token).
  CHECK(hashes[1].value == xxh3({3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0}));
  // Without eagle the same tokens are two plain blocks of two (and a dropped partial).
  const auto plain = compute_block_hashes(tokens, 2);
  REQUIRE(plain.size() == 2);
  CHECK(plain[0].value == xxh3({1, 0, 0, 0, 2, 0, 0, 0}));
  CHECK(plain[0] != hashes[0]);
}

TEST_CASE("eagle_hashes_a_block_only_once_the_token_after_it_exists") {
  const BlockHashOptions eagle{kBlockHashSeed, true, {}};
  // 4 tokens, block size 2: block 1 (tokens 3, 4) has no lookahead token yet.
  const std::vector<std::uint32_t> four{1, 2, 3, 4};
  const auto hashes = compute_block_hashes(four, 2, eagle);
  REQUIRE(hashes.size() == 1);
  CHECK(hashes[0].value == xxh3({1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}));
  CHECK(complete_block_count(0, 2, true) == 0);
  CHECK(complete_block_count(1, 2, true) == 0);
  CHECK(complete_block_count(2, 2, true) == 0);
  CHECK(complete_block_count(3, 2, true) == 1);
  CHECK(complete_block_count(4, 2, true) == 1);
  CHECK(complete_block_count(5, 2, true) == 2);
  CHECK(complete_block_count(4, 2, false) == 2);
  CHECK(complete_block_count(4, 0, true) == 0);
  CHECK(compute_block_hashes(four, 0, eagle).empty());
}

TEST_CASE("mm_hashes_are_sorted_and_appended_as_u64_le_after_the_block_tokens") {
  const std::vector<std::uint32_t> tokens{1, 2, 3, 4};
  // Block 0 carries two mm objects given out of order; block 1 none.
  const std::vector<std::vector<std::uint64_t>> mm{{0x0102030405060708ULL, 3}, {}};
  const auto hashes = compute_block_hashes(tokens, 2, BlockHashOptions{kBlockHashSeed, false, mm});
  REQUIRE(hashes.size() == 2);
  CHECK(hashes[0].value == xxh3({1,    0,    0,    0,    2,    0,    0,    0,        // tokens 1, 2
                                 3,    0,    0,    0,    0,    0,    0,    0,        // mm hash 3 (smaller first)
                                 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));  // 0x0102030405060708
  CHECK(hashes[1].value == xxh3({3, 0, 0, 0, 4, 0, 0, 0}));
  // The order the engine lists them in does not matter.
  const std::vector<std::vector<std::uint64_t>> swapped{{3, 0x0102030405060708ULL}};
  CHECK(compute_block_hashes(tokens, 2, BlockHashOptions{kBlockHashSeed, false, swapped})[0] == hashes[0]);
}

TEST_CASE("mm_hashes_follow_the_eagle_window_and_use_the_lora_seed") {
  constexpr std::string_view lora = "adapter-a";
  const std::uint64_t seed = 1337 + XXH3_64bits_withSeed(lora.data(), lora.size(), 0);  // wrapping u64
  REQUIRE(block_hash_seed(lora) == seed);
  const std::vector<std::uint32_t> tokens{7, 8, 9};
  const std::vector<std::vector<std::uint64_t>> mm{{0xFFULL}};
  const auto hashes = compute_block_hashes(tokens, 2, BlockHashOptions{seed, true, mm});
  REQUIRE(hashes.size() == 1);
  CHECK(hashes[0].value == xxh3({7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 0xFF, 0, 0, 0, 0, 0, 0, 0}, seed));
}

TEST_CASE("an_empty_mm_list_or_a_block_past_the_list_hashes_its_tokens_only") {
  const std::vector<std::uint32_t> tokens{5, 6, 7, 8};
  const std::vector<std::vector<std::uint64_t>> mm{{}};
  const auto hashes = compute_block_hashes(tokens, 2, BlockHashOptions{kBlockHashSeed, false, mm});
  REQUIRE(hashes.size() == 2);
  CHECK(hashes[0].value == xxh3({5, 0, 0, 0, 6, 0, 0, 0}));
  CHECK(hashes[1].value == xxh3({7, 0, 0, 0, 8, 0, 0, 0}));
  CHECK(hashes == compute_block_hashes(tokens, 2));
}
