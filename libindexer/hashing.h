// Dynamo-compatible block hashing: local block hashes of full token blocks and the sequence-hash
// chain that gives each block its external (prefix-committing) id. See shared spec wire-format.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx {

inline constexpr std::uint64_t kBlockHashSeed = 1337;

// XXH3-64 with `seed` over raw bytes.
std::uint64_t xxh3_64(std::span<const std::byte> bytes, std::uint64_t seed);

// Seed for block hashes: 1337 + XXH3(lora, 0) + XXH3(namespace, 1), wrapping; empty means absent.
std::uint64_t block_hash_seed(std::string_view lora_name = {}, std::string_view cache_namespace = {});

// How a token sequence is cut into hashed blocks (Dynamo's block hash options).
//  - seed: block_hash_seed(lora_name, cache_namespace).
//  - eagle (speculative decoding with an Eagle draft model): block i hashes the window of
//    block_size + 1 tokens starting at i * block_size, i.e. its own tokens plus the first token
//    of the next block (stride block_size, windows overlap by one token). Only complete windows
//    are hashed, so n tokens give (n - 1) / block_size blocks: the last block of a sequence has a
//    hash only once the token after it exists.
//  - block_mm_hashes: multimodal content; block i's mm hashes (block_mm_hashes[i], any order,
//    duplicates kept) are sorted ascending and appended as u64 LE after the window's token bytes.
//    An empty list, or a block past the end of the span, hashes its tokens only.
struct BlockHashOptions {
  std::uint64_t seed = kBlockHashSeed;
  bool eagle = false;
  std::span<const std::vector<std::uint64_t>> block_mm_hashes = {};
};

// Number of complete blocks (hash windows) in `token_count` tokens; 0 when block_size is 0.
std::size_t complete_block_count(std::size_t token_count, std::uint32_t block_size, bool eagle = false);

// Hash of one block of token ids (little-endian u32 bytes).
LocalBlockHash compute_block_hash(std::span<const std::uint32_t> tokens, std::uint64_t seed = kBlockHashSeed);
// Hash of one window of token ids followed by its mm hashes (sorted here, then u64 LE).
LocalBlockHash compute_block_hash(std::span<const std::uint32_t> window, std::span<const std::uint64_t> mm_hashes,
                                  std::uint64_t seed = kBlockHashSeed);

// Local hashes of every full block of `block_size` tokens; a trailing partial block is dropped.
std::vector<LocalBlockHash> compute_block_hashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                                                 std::uint64_t seed = kBlockHashSeed);
// The same with Eagle windows and multimodal hashes (see BlockHashOptions).
std::vector<LocalBlockHash> compute_block_hashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                                                 const BlockHashOptions& options);

// One step of the chain: XXH3(seed 1337) over parent (u64 LE) then local (u64 LE).
ExternalSequenceBlockHash chain_sequence_hash(ExternalSequenceBlockHash parent, LocalBlockHash local);

// Sequence hashes for `locals`; without a parent the first equals the first local hash.
std::vector<ExternalSequenceBlockHash> compute_sequence_hashes(
    std::span<const LocalBlockHash> locals, std::optional<ExternalSequenceBlockHash> parent = std::nullopt);

}  // namespace kvidx
