#include "libindexer/index_digest.h"

#include <xxhash.h>

#include <array>
#include <cstdio>
#include <map>
#include <tuple>
#include <unordered_map>

namespace kvidx {
namespace {

constexpr std::uint64_t kPathSeed = 0x6b766964782d7061ULL;   // "kvidx-pa"
constexpr std::uint64_t kBlockSeed = 0x6b766964782d626cULL;  // "kvidx-bl"
constexpr std::uint64_t kTotalSeed = 0x6b766964782d746fULL;  // "kvidx-to"

std::uint64_t hash_words(std::span<const std::uint64_t> words, std::uint64_t seed) {
  return XXH3_64bits_withSeed(words.data(), words.size_bytes(), seed);
}

using Key = std::tuple<WorkerId, DpRank, StorageTier>;

}  // namespace

IndexDigest digest_of(std::span<const RouterEvent> dump) {
  std::map<Key, StreamDigest> streams;
  // Per stream: external name -> path hash of the block it names (a parent's name resolves here).
  std::map<Key, std::unordered_map<std::uint64_t, std::uint64_t>> paths;
  for (const RouterEvent& event : dump) {
    const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data);
    if (stored == nullptr) continue;
    const StorageTier tier = event.storage_tier.value_or(StorageTier::device);
    const Key key{event.worker_id, event.event.dp_rank, tier};
    auto& names = paths[key];
    StreamDigest& digest = streams[key];
    digest.stream = event.stream();
    digest.tier = tier;
    std::uint64_t path = 0;
    if (stored->parent_hash) {
      const auto parent = names.find(stored->parent_hash->value);
      if (parent != names.end()) path = parent->second;
    }
    for (const StoredBlock& block : stored->blocks) {
      const std::array<std::uint64_t, 2> link{path, block.tokens_hash.value};
      path = hash_words(link, kPathSeed);
      const std::array<std::uint64_t, 2> held{path, block.block_hash.value};
      digest.digest += hash_words(held, kBlockSeed);  // NOTE: a sum: independent of order
      ++digest.blocks;
      names[block.block_hash.value] = path;
    }
  }
  IndexDigest out;
  out.streams.reserve(streams.size());
  for (auto& [key, digest] : streams) {
    const std::array<std::uint64_t, 5> words{digest.stream.worker_id, digest.stream.dp_rank,
                                             static_cast<std::uint64_t>(digest.tier), digest.blocks, digest.digest};
    out.total += hash_words(words, kTotalSeed);
    out.blocks += digest.blocks;
    out.streams.push_back(digest);
  }
  return out;
}

std::string digest_hex(std::uint64_t digest) {
  std::array<char, 17> text{};
  std::snprintf(text.data(), text.size(), "%016llx", static_cast<unsigned long long>(digest));
  return text.data();
}

}  // namespace kvidx
