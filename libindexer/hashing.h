// Dynamo-compatible block hashing: local block hashes of full token blocks and the sequence-hash
// chain that gives each block its external (prefix-committing) id. See shared spec wire-format.md.
#pragma once

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

// Hash of one block of token ids (little-endian u32 bytes).
LocalBlockHash compute_block_hash(std::span<const std::uint32_t> tokens, std::uint64_t seed = kBlockHashSeed);

// Local hashes of every full block of `block_size` tokens; a trailing partial block is dropped.
std::vector<LocalBlockHash> compute_block_hashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                                                 std::uint64_t seed = kBlockHashSeed);

// One step of the chain: XXH3(seed 1337) over parent (u64 LE) then local (u64 LE).
ExternalSequenceBlockHash chain_sequence_hash(ExternalSequenceBlockHash parent, LocalBlockHash local);

// Sequence hashes for `locals`; without a parent the first equals the first local hash.
std::vector<ExternalSequenceBlockHash> compute_sequence_hashes(
    std::span<const LocalBlockHash> locals, std::optional<ExternalSequenceBlockHash> parent = std::nullopt);

}  // namespace kvidx
