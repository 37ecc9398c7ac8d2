#include "libindexer/hashing.h"

#include <xxhash.h>

#include <array>
#include <bit>
#include <cstring>

namespace kvidx {
namespace {

static_assert(std::endian::native == std::endian::little, "hash byte layout assumes a little-endian host");

std::uint64_t hash_text(std::string_view text, std::uint64_t seed) {
  return XXH3_64bits_withSeed(text.data(), text.size(), seed);
}

}  // namespace

std::uint64_t xxh3_64(std::span<const std::byte> bytes, std::uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

std::uint64_t block_hash_seed(std::string_view lora_name, std::string_view cache_namespace) {
  std::uint64_t seed = kBlockHashSeed;  // unsigned arithmetic wraps, as the reference does
  if (!lora_name.empty()) seed += hash_text(lora_name, 0);
  if (!cache_namespace.empty()) seed += hash_text(cache_namespace, 1);
  return seed;
}

LocalBlockHash compute_block_hash(std::span<const std::uint32_t> tokens, std::uint64_t seed) {
  return LocalBlockHash{xxh3_64(std::as_bytes(tokens), seed)};
}

std::vector<LocalBlockHash> compute_block_hashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                                                 std::uint64_t seed) {
  std::vector<LocalBlockHash> out;
  if (block_size == 0) return out;
  const std::size_t full_blocks = tokens.size() / block_size;
  out.reserve(full_blocks);
  for (std::size_t i = 0; i < full_blocks; ++i) {
    out.push_back(compute_block_hash(tokens.subspan(i * block_size, block_size), seed));
  }
  return out;
}

ExternalSequenceBlockHash chain_sequence_hash(ExternalSequenceBlockHash parent, LocalBlockHash local) {
  std::array<std::uint64_t, 2> words{parent.value, local.value};
  return ExternalSequenceBlockHash{XXH3_64bits_withSeed(words.data(), sizeof(words), kBlockHashSeed)};
}

std::vector<ExternalSequenceBlockHash> compute_sequence_hashes(std::span<const LocalBlockHash> locals,
                                                               std::optional<ExternalSequenceBlockHash> parent) {
  std::vector<ExternalSequenceBlockHash> out;
  out.reserve(locals.size());
  for (const auto local : locals) {
    const auto next = parent ? chain_sequence_hash(*parent, local) : ExternalSequenceBlockHash{local.value};
    out.push_back(next);
    parent = next;
  }
  return out;
}

}  // namespace kvidx
