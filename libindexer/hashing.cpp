#include "libindexer/hashing.h"

#include <xxhash.h>

#include <algorithm>
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

std::size_t complete_block_count(std::size_t token_count, std::uint32_t block_size, bool eagle) {
  if (block_size == 0) return 0;
  if (eagle) return token_count == 0 ? 0 : (token_count - 1) / block_size;
  return token_count / block_size;
}

LocalBlockHash compute_block_hash(std::span<const std::uint32_t> tokens, std::uint64_t seed) {
  return LocalBlockHash{xxh3_64(std::as_bytes(tokens), seed)};
}

LocalBlockHash compute_block_hash(std::span<const std::uint32_t> window, std::span<const std::uint64_t> mm_hashes,
                                  std::uint64_t seed) {
  if (mm_hashes.empty()) return compute_block_hash(window, seed);
  std::vector<std::uint64_t> sorted(mm_hashes.begin(), mm_hashes.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::byte> bytes(window.size_bytes() + sorted.size() * sizeof(std::uint64_t));
  if (!window.empty()) std::memcpy(bytes.data(), window.data(), window.size_bytes());
  std::memcpy(bytes.data() + window.size_bytes(), sorted.data(), sorted.size() * sizeof(std::uint64_t));
  return LocalBlockHash{xxh3_64(bytes, seed)};
}

std::vector<LocalBlockHash> compute_block_hashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                                                 std::uint64_t seed) {
  return compute_block_hashes(tokens, block_size, BlockHashOptions{seed});
}

std::vector<LocalBlockHash> compute_block_hashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                                                 const BlockHashOptions& options) {
  std::vector<LocalBlockHash> out;
  const std::size_t blocks = complete_block_count(tokens.size(), block_size, options.eagle);
  const std::size_t window = std::size_t{block_size} + (options.eagle ? 1 : 0);
  out.reserve(blocks);
  for (std::size_t i = 0; i < blocks; ++i) {
    const auto tokens_of_block = tokens.subspan(i * block_size, window);
    if (i < options.block_mm_hashes.size()) {
      out.push_back(compute_block_hash(tokens_of_block, options.block_mm_hashes[i], options.seed));
    } else {
      out.push_back(compute_block_hash(tokens_of_block, options.seed));
    }
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
