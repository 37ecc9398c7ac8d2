// Randomized check of LaneIndexer + ConcurrentRadixTree against a deliberately naive model.
// Model, per (worker, rank): external hash -> the path of local hashes from the root to that
// block. A store with an unheld parent is dropped whole; removing a block drops every held block
// whose path extends it; the score of a query is the longest prefix whose block is held.
// A small local-hash alphabet makes streams share prefixes, so edges split, grow, die and revive.
// Two fleets: every stream names a block by the same chain hash (a shared hash seed), or every
// stream hashes its own way (external hash = f(stream, chain hash), engines without a shared seed).
// A third run spreads every stream's events over the four storage tiers: each tier is its own
// model (a Cleared or a removal of the stream empties every tier's), and each tier's tree must
// match its model alone.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "libindexer/hashing.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/radix_tree_test_peer.h"
#include "tests/support/tree_assertions.h"

using namespace kvidx;

namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kDefaultOps = 20'000;
#else
constexpr std::size_t kDefaultOps = 100'000;
#endif

std::size_t ops_per_seed() {
  if (const char* env = std::getenv("KVIDX_MODEL_OPS")) return std::strtoull(env, nullptr, 10);
  return kDefaultOps;
}

using Path = std::vector<std::uint64_t>;

ExternalSequenceBlockHash next_external(std::optional<ExternalSequenceBlockHash> parent, std::uint64_t local) {
  // Same chain as the test builders: a root block's id is its local hash.
  return parent ? chain_sequence_hash(*parent, LocalBlockHash{local}) : ExternalSequenceBlockHash{local};
}

// How streams name blocks: the shared chain hash, or salted per stream (an invertible mix).
struct Naming {
  bool per_stream = false;

  std::uint64_t salt(WorkerWithDpRank stream) const {
    if (!per_stream) return 0;
    std::uint64_t x = (stream.worker_id + 1) * 0x9E3779B97F4A7C15ULL ^ (stream.dp_rank + 1) * 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 31;
    return x | 1;  // never 0: every stream's names differ from the shared chain
  }
  ExternalSequenceBlockHash name(WorkerWithDpRank stream, ExternalSequenceBlockHash chain) const {
    return {chain.value ^ salt(stream)};
  }
  ExternalSequenceBlockHash chain_of(WorkerWithDpRank stream, ExternalSequenceBlockHash name) const {
    return {name.value ^ salt(stream)};
  }
};

class PathModel {
 public:
  explicit PathModel(Naming naming) : naming_(naming) {}

  bool store(WorkerWithDpRank stream, std::optional<ExternalSequenceBlockHash> parent, const KvCacheStoreData& data) {
    auto& held = streams_[stream];
    Path path;
    if (parent) {
      auto it = held.find(parent->value);
      if (it == held.end()) return false;
      path = it->second;
    }
    for (const auto& block : data.blocks) {
      path.push_back(block.tokens_hash.value);
      held[block.block_hash.value] = path;
    }
    return true;
  }

  void remove(WorkerWithDpRank stream, const std::vector<ExternalSequenceBlockHash>& hashes) {
    auto& held = streams_[stream];
    for (const auto hash : hashes) {
      auto it = held.find(hash.value);
      if (it == held.end()) continue;
      const Path cut = it->second;
      std::erase_if(held, [&](const auto& entry) {
        const Path& path = entry.second;
        return path.size() >= cut.size() && std::equal(cut.begin(), cut.end(), path.begin());
      });
    }
  }

  void clear(WorkerWithDpRank stream) { streams_[stream].clear(); }

  std::size_t block_count(WorkerWithDpRank stream) const {
    auto it = streams_.find(stream);
    return it == streams_.end() ? 0 : it->second.size();
  }

  std::uint32_t score(WorkerWithDpRank stream, const Path& query) const {
    auto it = streams_.find(stream);
    if (it == streams_.end()) return 0;
    std::optional<ExternalSequenceBlockHash> ext;
    std::uint32_t depth = 0;
    for (const auto local : query) {
      ext = next_external(ext, local);
      if (!it->second.contains(naming_.name(stream, *ext).value)) break;
      ++depth;
    }
    return depth;
  }

  // A random held block of the stream, if any.
  std::optional<std::pair<ExternalSequenceBlockHash, Path>> pick(WorkerWithDpRank stream, std::mt19937_64& rng) const {
    auto it = streams_.find(stream);
    if (it == streams_.end() || it->second.empty()) return std::nullopt;
    auto entry = it->second.begin();
    std::advance(entry, static_cast<std::ptrdiff_t>(rng() % it->second.size()));
    return std::pair{ExternalSequenceBlockHash{entry->first}, entry->second};
  }

 private:
  Naming naming_;
  std::unordered_map<WorkerWithDpRank, std::unordered_map<std::uint64_t, Path>, WorkerWithDpRankHasher> streams_;
};

struct Scenario {
  std::uint64_t seed;
  std::size_t lanes;
  WorkerId workers;
  DpRank ranks;
  std::uint64_t alphabet;
  Naming naming{};
  bool tiers = false;  // events spread over every storage tier (else all device)
};

using TierModels = std::vector<PathModel>;  // index tier_index

// Stored chain of `locals` after `parent` (the stream's name of it), named as `stream` names blocks.
KvCacheStoreData chain(const Naming& naming, WorkerWithDpRank stream, std::optional<ExternalSequenceBlockHash> parent,
                       const Path& locals) {
  KvCacheStoreData data;
  data.parent_hash = parent;
  std::optional<ExternalSequenceBlockHash> ext;
  if (parent) ext = naming.chain_of(stream, *parent);
  for (const auto local : locals) {
    ext = next_external(ext, local);
    data.blocks.push_back(StoredBlock{naming.name(stream, *ext), LocalBlockHash{local}});
  }
  return data;
}

void verify(const LaneIndexer& index, const TierModels& models, const Scenario& scenario, std::mt19937_64& rng,
            std::size_t op) {
  const PathModel& model = models[tier_index(StorageTier::device)];
  for (WorkerId w = 0; w < scenario.workers; ++w) {
    for (DpRank r = 0; r < scenario.ranks; ++r) {
      const WorkerWithDpRank stream{w, r};
      INFO("seed " << scenario.seed << " op " << op << " stream " << w << "/" << r);
      REQUIRE(index.tree().block_count(stream) == model.block_count(stream));
      for (const StorageTier tier : kStorageTiers) {
        const ConcurrentRadixTree* tree = index.tier_tree(tier);
        CAPTURE(to_string(tier));
        REQUIRE((tree == nullptr ? 0 : tree->block_count(stream)) == models[tier_index(tier)].block_count(stream));
      }
    }
  }
  // Every split, merge and growth kept each node's edge fingerprint equal to its edge's.
  for (const StorageTier tier : kStorageTiers) {
    if (const ConcurrentRadixTree* tree = index.tier_tree(tier)) {
      INFO("seed " << scenario.seed << " op " << op << " tier " << to_string(tier));
      REQUIRE(RadixTreeTestPeer::stale_fingerprints(*tree) == 0);
    }
  }
  for (int q = 0; q < 24; ++q) {
    Path query;
    // Half the queries follow a held path (then maybe wander off), half are random.
    const WorkerWithDpRank owner{rng() % scenario.workers, static_cast<DpRank>(rng() % scenario.ranks)};
    // NOTE: tiered runs follow each tier's paths in turn (no extra draw: the others keep their sequence).
    const PathModel& source = scenario.tiers ? models[static_cast<std::size_t>(q) % kStorageTierCount] : model;
    if (auto held = source.pick(owner, rng); held && q % 2 == 0) query = held->second;
    const std::size_t extra = rng() % 4;
    for (std::size_t i = 0; i < extra || query.empty(); ++i) query.push_back(1 + rng() % scenario.alphabet);

    std::vector<LocalBlockHash> locals;
    for (const auto v : query) locals.push_back(LocalBlockHash{v});
    const TieredOverlapScores tiered = index.find_tiered_matches(locals);
    const OverlapScores& scores = tiered.device;
    REQUIRE(index.find_matches(locals).scores == scores.scores);
    // Lower tiers: each against its own model only.
    for (const StorageTier tier : kStorageTiers) {
      if (tier == StorageTier::device) continue;
      const auto& tier_scores = tiered.scores_of(tier);
      std::size_t scored = 0;
      for (WorkerId w = 0; w < scenario.workers; ++w) {
        for (DpRank r = 0; r < scenario.ranks; ++r) {
          const WorkerWithDpRank stream{w, r};
          const std::uint32_t want = models[tier_index(tier)].score(stream, query);
          INFO("seed " << scenario.seed << " op " << op << " tier " << to_string(tier) << " stream " << w << "/" << r);
          const auto it = tier_scores.find(stream);
          REQUIRE((it == tier_scores.end() ? 0u : it->second) == want);
          if (want > 0) ++scored;
        }
      }
      REQUIRE(tier_scores.size() == scored);
    }
    std::size_t expected_streams = 0;
    std::vector<std::size_t> expected_frequencies;  // [d]: streams scoring more than d
    for (WorkerId w = 0; w < scenario.workers; ++w) {
      for (DpRank r = 0; r < scenario.ranks; ++r) {
        const WorkerWithDpRank stream{w, r};
        const std::uint32_t want = model.score(stream, query);
        if (expected_frequencies.size() < want) expected_frequencies.resize(want, 0);
        for (std::uint32_t d = 0; d < want; ++d) ++expected_frequencies[d];
        INFO("seed " << scenario.seed << " op " << op << " stream " << w << "/" << r << " query size " << query.size()
                     << " scores " << testing::describe(scores));
        if (want == 0) {
          REQUIRE_FALSE(scores.scores.contains(stream));
          continue;
        }
        ++expected_streams;
        REQUIRE(testing::score_of(scores, stream) == std::optional<std::uint32_t>{want});
        REQUIRE(scores.tree_sizes.at(stream) == model.block_count(stream));
      }
    }
    REQUIRE(scores.scores.size() == expected_streams);
    REQUIRE(scores.frequencies == expected_frequencies);
  }
}

void run_scenario(const Scenario& scenario) {
  std::mt19937_64 rng(scenario.seed);
  LaneIndexer index(scenario.lanes);
  TierModels models(kStorageTierCount, PathModel(scenario.naming));
  std::vector<ExternalSequenceBlockHash> retired;  // hashes once stored: removes of stale entries
  const std::size_t ops = ops_per_seed();
  auto random_locals = [&](std::size_t max_len) {
    Path locals(1 + rng() % max_len);
    for (auto& v : locals) v = 1 + rng() % scenario.alphabet;
    return locals;
  };

  // A reader races the lanes the whole time: scores must stay within the query, and every scored
  // stream must report its size.
  std::atomic<bool> stop_reader{false};
  std::atomic<std::size_t> bad_reads{0};
  std::thread reader([&] {
    std::mt19937_64 reader_rng(scenario.seed * 7919);
    std::vector<LocalBlockHash> query;
    while (!stop_reader.load(std::memory_order_relaxed)) {
      query.assign(1 + reader_rng() % 10, LocalBlockHash{});
      for (auto& local : query) local.value = 1 + reader_rng() % scenario.alphabet;
      const TieredOverlapScores tiered = index.find_tiered_matches(query);
      const OverlapScores& scores = tiered.device;
      for (const auto& [stream, score] : scores.scores) {
        if (score == 0 || score > query.size() || !scores.tree_sizes.contains(stream)) bad_reads.fetch_add(1);
      }
      for (const auto& lower : tiered.lower) {
        for (const auto& [stream, score] : lower) {
          if (score == 0 || score > query.size()) bad_reads.fetch_add(1);
        }
      }
    }
  });

  std::size_t performed = 0;  // operations actually issued (picks that find nothing are skipped)
  for (std::uint64_t op = 0; performed < ops; ++op) {
    const WorkerWithDpRank stream{rng() % scenario.workers, static_cast<DpRank>(rng() % scenario.ranks)};
    const unsigned roll = static_cast<unsigned>(rng() % 100);
    RouterEvent event{stream.worker_id, KvCacheEvent{op, KvCacheClearData{}, stream.dp_rank}, std::nullopt};
    // NOTE: drawn only in the tiered scenarios, so the device-only ones keep their exact sequence.
    const StorageTier tier = scenario.tiers ? kStorageTiers[rng() % kStorageTierCount] : StorageTier::device;
    if (scenario.tiers) event.storage_tier = tier;
    PathModel& model = models[tier_index(tier)];
    if (roll < 38) {
      auto parent = model.pick(stream, rng);
      if (!parent) continue;
      if (parent->second.size() > 14) continue;  // keep paths short enough to share
      auto data = chain(scenario.naming, stream, parent->first, random_locals(4));
      model.store(stream, parent->first, data);
      event.event.data = std::move(data);
    } else if (roll < 62) {
      auto data = chain(scenario.naming, stream, std::nullopt, random_locals(6));
      model.store(stream, std::nullopt, data);
      event.event.data = std::move(data);
    } else if (roll < 66) {
      // A parent this stream does not hold (maybe another stream's): the whole store is dropped.
      auto parent = next_external(ExternalSequenceBlockHash{rng()}, 1 + rng() % scenario.alphabet);
      if (scenario.naming.per_stream && rng() % 2 == 0) {
        // Another stream's name of a block: never this stream's name, whatever it holds.
        const WorkerWithDpRank other{rng() % scenario.workers, static_cast<DpRank>(rng() % scenario.ranks)};
        if (auto held = model.pick(other, rng); held && !(other == stream)) parent = held->first;
      }
      auto data = chain(scenario.naming, stream, parent, random_locals(3));
      REQUIRE_FALSE(model.store(stream, parent, data));
      event.event.data = std::move(data);
    } else if (roll < 92) {
      std::vector<ExternalSequenceBlockHash> hashes;
      const std::size_t count = 1 + rng() % 3;
      for (std::size_t i = 0; i < count; ++i) {
        if (rng() % 5 == 0 && !retired.empty()) {
          hashes.push_back(retired[rng() % retired.size()]);
        } else if (auto held = model.pick(stream, rng)) {
          hashes.push_back(held->first);
        }
      }
      if (hashes.empty()) continue;
      for (const auto h : hashes) retired.push_back(h);
      if (retired.size() > 4096) retired.erase(retired.begin(), retired.begin() + 2048);
      model.remove(stream, hashes);
      event.event.data = KvCacheRemoveData{std::move(hashes)};
    } else if (roll < 96) {
      for (auto& each : models) each.clear(stream);  // event already is Cleared: every tier
    } else if (roll < 98) {
      REQUIRE(index.remove_worker_dp_rank(stream.worker_id, stream.dp_rank) == IndexerStatus::ok);
      for (auto& each : models) each.clear(stream);
      ++performed;
      continue;
    } else if (roll < 99) {
      REQUIRE(index.remove_worker(stream.worker_id) == IndexerStatus::ok);
      for (auto& each : models) {
        for (DpRank r = 0; r < scenario.ranks; ++r) each.clear({stream.worker_id, r});
      }
      ++performed;
      continue;
    } else {
      index.tree().run_cleanup();  // concurrently with the lanes
      ++performed;
      continue;
    }
    REQUIRE(index.enqueue_event(std::move(event)) == IndexerStatus::ok);
    ++performed;

    if (op % 256 == 255) {
      REQUIRE(index.flush() == IndexerStatus::ok);
      verify(index, models, scenario, rng, op);
    }
  }
  stop_reader.store(true);
  reader.join();
  CHECK(bad_reads.load() == 0);
  REQUIRE(index.flush() == IndexerStatus::ok);
  verify(index, models, scenario, rng, performed);
  index.tree().run_cleanup();
  verify(index, models, scenario, rng, performed);

  // A dump restores to the same index: every stream's blocks under its own names.
  {
    auto dumped = index.dump_events();
    REQUIRE(dumped.has_value());
    LaneIndexer restored(scenario.lanes);
    const std::size_t dumped_events = dumped->size();
    REQUIRE(restored.enqueue_events(*dumped) == IndexerStatus::ok);
    REQUIRE(restored.flush() == IndexerStatus::ok);
    CHECK(restored.metrics().applied_with(ApplyStatus::ok) == dumped_events);
    verify(restored, models, scenario, rng, performed);
  }

  // Dropping every stream returns the tree to empty once cleanup runs.
  for (WorkerId w = 0; w < scenario.workers; ++w) REQUIRE(index.remove_worker(w) == IndexerStatus::ok);
  index.tree().run_cleanup();
  CHECK(index.shard_sizes().block_count == 0);
  CHECK(index.tree().node_count() == 0);
  CHECK(RadixTreeTestPeer::raw_child_edge_count(index.tree()) == 0);
  CHECK(index.tree().attached_block_count() == 0);
  CHECK(index.shard_sizes().blocks_by_tier == std::array<std::size_t, kStorageTierCount>{});
}

}  // namespace

TEST_CASE("randomized events through lanes match the path model") {
  const std::vector<Scenario> scenarios{
      {1, 4, 6, 2, 5}, {2, 3, 4, 3, 3}, {3, 2, 8, 1, 6}, {4, 4, 3, 4, 4}, {5, 1, 5, 2, 8},
  };
  for (const auto& scenario : scenarios) {
    CAPTURE(scenario.seed);
    run_scenario(scenario);
  }
}

TEST_CASE("randomized events through lanes match the path model when every stream hashes its own way") {
  const Naming per_stream{true};
  const std::vector<Scenario> scenarios{
      {11, 4, 6, 2, 5, per_stream}, {12, 3, 4, 3, 3, per_stream}, {13, 2, 8, 1, 6, per_stream},
      {14, 4, 3, 4, 4, per_stream}, {15, 1, 5, 2, 8, per_stream},
  };
  for (const auto& scenario : scenarios) {
    CAPTURE(scenario.seed);
    run_scenario(scenario);
  }
}

TEST_CASE("randomized events through lanes match the path model in every storage tier") {
  const Naming per_stream{true};
  const std::vector<Scenario> scenarios{
      {21, 4, 6, 2, 5, {}, true},
      {22, 2, 4, 3, 3, per_stream, true},
      {23, 1, 5, 2, 4, {}, true},
  };
  for (const auto& scenario : scenarios) {
    CAPTURE(scenario.seed);
    run_scenario(scenario);
  }
}
