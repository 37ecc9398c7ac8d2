// Google Benchmark micro benches: find_matches (32/128/1024-block queries, idle and while a writer
// thread applies Stored/Removed pairs; and over a prompt every one of 1000 or 7000 streams holds),
// apply_event (a 128-block Stored + its Removed on a populated index) and the JSON decoder;
// kvidx's ConcurrentRadixTree beside the three baselines.
#include <benchmark/benchmark.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "bench/baselines/flat_hash_index.h"
#include "bench/baselines/mutex_radix_tree.h"
#include "bench/baselines/positional_index.h"
#include "bench/common/workloads.h"
#include "libcodec/event_codec.h"
#include "libindexer/hashing.h"
#include "libindexer/tree/radix_tree.h"

namespace {

using namespace kvidx;
using namespace kvidx::bench;

// The four indexes with one calling convention; `Lookup` is per calling thread for kvidx.
struct KvidxIndex {
  ConcurrentRadixTree tree;
  using Lookup = DirectLookup;
  void apply(Lookup& lookup, const RouterEvent& e) { tree.apply_event(lookup, e); }
  std::size_t find(std::span<const LocalBlockHash> q) const { return tree.find_matches(q, false).scores.size(); }
};
struct MutexRadixIndex {
  MutexRadixTree tree;
  struct Lookup {};
  void apply(Lookup&, const RouterEvent& e) { tree.apply_event(e); }
  std::size_t find(std::span<const LocalBlockHash> q) const { return tree.find_matches(q).scores.size(); }
};
struct FlatIndex {
  FlatHashIndex index;
  struct Lookup {};
  void apply(Lookup&, const RouterEvent& e) { index.apply_event(e); }
  std::size_t find(std::span<const LocalBlockHash> q) const { return index.find_matches(q).scores.size(); }
};
struct PositionalIdx {
  PositionalIndex index;
  struct Lookup {};
  void apply(Lookup&, const RouterEvent& e) { index.apply_event(e); }
  std::size_t find(std::span<const LocalBlockHash> q) const { return index.find_matches(q).scores.size(); }
};

// Deep sequences so 1024-block queries match all the way: 128 workers in 8 tenants, 4 sequences
// each of 1024 blocks (256 prompt + 768 body).
const SyntheticWorkload& workload() {
  static const SyntheticWorkload w = [] {
    SyntheticOptions o;
    o.workers = 128;
    o.tenants = 8;
    o.depth = 1024;
    o.prompt_blocks = 256;
    o.sequences_per_worker = 4;
    o.bodies = 96;
    return make_synthetic(o);
  }();
  return w;
}

const std::vector<std::vector<LocalBlockHash>>& queries(std::size_t length) {
  static std::map<std::size_t, std::vector<std::vector<LocalBlockHash>>> cache;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  auto& q = cache[length];
  if (q.empty()) q = make_queries(workload(), 256, length, length);
  return q;
}

// Writer-only streams (ids far above the workload's): a 128-block sequence stored then removed.
std::vector<RouterEvent> writer_cycle(WorkerId worker) {
  std::vector<LocalBlockHash> locals;
  for (std::uint64_t i = 0; i < 128; ++i) locals.push_back(LocalBlockHash{worker * 1'000'003ULL + i * 7 + 1});
  const auto ext = compute_sequence_hashes(locals);
  KvCacheStoreData stored;
  KvCacheRemoveData removed;
  for (std::size_t i = 0; i < locals.size(); ++i) {
    stored.blocks.push_back(StoredBlock{ext[i], locals[i]});
    removed.block_hashes.push_back(ext[i]);
  }
  return {RouterEvent{worker, KvCacheEvent{0, stored, 0}, std::nullopt},
          RouterEvent{worker, KvCacheEvent{1, removed, 0}, std::nullopt}};
}

template <typename Index>
Index& populated() {
  static Index* index = [] {
    auto* i = new Index();
    typename Index::Lookup lookup;
    for (const auto& e : workload().build) i->apply(lookup, e);
    static typename Index::Lookup keep;  // kvidx: the lookups must outlive nothing else; keep them
    keep = std::move(lookup);
    return i;
  }();
  return *index;
}

// The writer of the writers:1 rows: a thread calling `round` (which applies some events and
// returns how many) until the bench's loop is done, then reporting the count as a counter.
class BackgroundWriter {
 public:
  template <typename Round>
  BackgroundWriter(bool enabled, Round round) {
    if (!enabled) return;
    thread_ = std::thread([this, round = std::move(round)]() mutable {
      while (!stop_.load(std::memory_order_relaxed)) writes_.fetch_add(round(), std::memory_order_relaxed);
    });
  }
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;
  ~BackgroundWriter() { stop(); }

  // Stops and joins the writer; records writer_events on `state` if it ran.
  void finish(benchmark::State& state) {
    stop();
    if (ran_) state.counters["writer_events"] = static_cast<double>(writes_.load());
  }

 private:
  void stop() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
      ran_ = true;
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> writes_{0};
  bool ran_ = false;
  std::thread thread_;
};

template <typename Index>
void BM_FindMatches(benchmark::State& state) {
  Index& index = populated<Index>();
  const auto length = static_cast<std::size_t>(state.range(0));
  const bool busy = state.range(1) != 0;
  const auto& qs = queries(length);
  std::vector<std::vector<RouterEvent>> cycles;
  for (WorkerId w = 0; w < 8; ++w) cycles.push_back(writer_cycle(1'000'000 + w));
  typename Index::Lookup lookup;
  BackgroundWriter writer(busy, [&]() -> std::uint64_t {
    for (const auto& cycle : cycles) {
      for (const auto& e : cycle) index.apply(lookup, e);
    }
    return 16;
  });
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(index.find(qs[i++ % qs.size()]));
  }
  writer.finish(state);
  state.SetItemsProcessed(state.iterations());
}

// A fleet whose every stream holds one system prompt, so each query scores them all (the
// reference's find_matches returns every stream matching at least one block): stream s stores
// the prompt (16 blocks), one of 50 bodies (8) and a tail of its own (8); a query is a stream's
// whole sequence. Every eighth stream belongs to the writer (writers:1), which stores a 4-block
// extension under one of its tails and removes it again, changing block counts the query reads.
struct WideFleet {
  std::vector<RouterEvent> reader_build, writer_build;
  std::vector<std::vector<RouterEvent>> writer_cycles;
  std::vector<std::vector<LocalBlockHash>> queries;
};

const WideFleet& wide_fleet(std::size_t holders) {
  static std::map<std::size_t, WideFleet> cache;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  WideFleet& f = cache[holders];
  if (!f.queries.empty()) return f;
  auto stored = [](WorkerId worker, std::optional<ExternalSequenceBlockHash> parent,
                   std::span<const LocalBlockHash> locals, std::span<const ExternalSequenceBlockHash> ext) {
    KvCacheStoreData d;
    d.parent_hash = parent;
    for (std::size_t i = 0; i < locals.size(); ++i) d.blocks.push_back(StoredBlock{ext[i], locals[i]});
    return RouterEvent{worker, KvCacheEvent{0, d, 0}, std::nullopt};
  };
  for (std::uint64_t s = 0; s < holders; ++s) {
    std::vector<LocalBlockHash> locals;
    for (std::uint64_t i = 0; i < 16; ++i) locals.push_back(LocalBlockHash{i + 1});
    for (std::uint64_t i = 0; i < 8; ++i) locals.push_back(LocalBlockHash{1000 + (s % 50) * 100 + i});
    for (std::uint64_t i = 0; i < 8; ++i) locals.push_back(LocalBlockHash{10'000'000 + s * 100 + i});
    for (std::uint64_t i = 0; i < 4; ++i) locals.push_back(LocalBlockHash{50'000'000 + s * 100 + i});
    const auto ext = compute_sequence_hashes(locals);
    const std::span<const LocalBlockHash> l(locals);
    const std::span<const ExternalSequenceBlockHash> e(ext);
    const WorkerId worker = s + 1;
    auto& build = s % 8 == 0 ? f.writer_build : f.reader_build;
    build.push_back(stored(worker, std::nullopt, l.first(16), e.first(16)));
    build.push_back(stored(worker, e[15], l.subspan(16, 8), e.subspan(16, 8)));
    build.push_back(stored(worker, e[23], l.subspan(24, 8), e.subspan(24, 8)));
    if (s % 8 == 0) {
      KvCacheRemoveData removed;
      removed.block_hashes.assign(e.begin() + 32, e.end());
      f.writer_cycles.push_back({stored(worker, e[31], l.subspan(32), e.subspan(32)),
                                 RouterEvent{worker, KvCacheEvent{0, removed, 0}, std::nullopt}});
    }
    if (s % std::max<std::size_t>(1, holders / 256) == 0) f.queries.emplace_back(locals.begin(), locals.begin() + 32);
  }
  return f;
}

template <typename Index>
void BM_FindMatchesWide(benchmark::State& state) {
  const auto holders = static_cast<std::size_t>(state.range(0));
  const bool busy = state.range(1) != 0;
  const WideFleet& fleet = wide_fleet(holders);
  // One index per fleet size, built once; the writer's streams keep their own lookup (kvidx's
  // lookups belong to one thread at a time).
  static std::map<std::size_t, std::pair<std::unique_ptr<Index>, typename Index::Lookup>> built;
  auto& [index, writer_lookup] = built[holders];
  if (!index) {
    index = std::make_unique<Index>();
    static std::map<std::size_t, typename Index::Lookup> reader_lookups;
    for (const auto& e : fleet.reader_build) index->apply(reader_lookups[holders], e);
    for (const auto& e : fleet.writer_build) index->apply(writer_lookup, e);
  }
  std::size_t next = 0;
  BackgroundWriter writer(busy, [&, &index = index, &writer_lookup = writer_lookup]() -> std::uint64_t {
    for (const auto& e : fleet.writer_cycles[next++ % fleet.writer_cycles.size()]) index->apply(writer_lookup, e);
    return 2;
  });
  std::size_t i = 0;
  std::size_t scored = 0;
  for (auto _ : state) {
    scored = index->find(fleet.queries[i++ % fleet.queries.size()]);
    benchmark::DoNotOptimize(scored);
  }
  writer.finish(state);
  if (scored != holders) state.SkipWithError("a query did not score every stream");
  state.SetItemsProcessed(state.iterations());
}

template <typename Index>
void BM_ApplyStoreRemove(benchmark::State& state) {
  Index& index = populated<Index>();
  typename Index::Lookup lookup;
  const auto cycle = writer_cycle(2'000'000);
  for (auto _ : state) {
    for (const auto& e : cycle) index.apply(lookup, e);
  }
  state.SetItemsProcessed(state.iterations() * 2);
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 256, benchmark::Counter::kIsRate);
}

void BM_DecodeStored128(benchmark::State& state) {
  const std::string json = encode_router_event(writer_cycle(3)[0]);
  for (auto _ : state) {
    auto decoded = decode_router_event(json);
    benchmark::DoNotOptimize(decoded);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(json.size()));
}

void BM_DecodeBatch16x4(benchmark::State& state) {
  std::vector<RouterEvent> batch;
  for (std::uint64_t i = 0; i < 16; ++i) {
    KvCacheStoreData d;
    for (std::uint64_t b = 0; b < 4; ++b) d.blocks.push_back(StoredBlock{{i * 1000 + b}, {b + 1}});
    batch.push_back(RouterEvent{i + 1, KvCacheEvent{i, d, 0}, std::nullopt});
  }
  const std::string json = encode_router_events(batch);
  for (auto _ : state) {
    auto decoded = decode_router_events(json);
    benchmark::DoNotOptimize(decoded);
  }
  state.SetItemsProcessed(state.iterations() * 16);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(json.size()));
}

void find_args(benchmark::internal::Benchmark* b) {
  for (const int busy : {0, 1}) {
    for (const int length : {32, 128, 1024}) b->Args({length, busy});
  }
  b->ArgNames({"blocks", "writers"})->UseRealTime();
}

void wide_args(benchmark::internal::Benchmark* b) {
  for (const int busy : {0, 1}) {
    for (const int holders : {1000, 7000}) b->Args({holders, busy});
  }
  b->ArgNames({"holders", "writers"})->UseRealTime();
}

BENCHMARK(BM_FindMatches<KvidxIndex>)->Name("find_matches/kvidx")->Apply(find_args);
BENCHMARK(BM_FindMatches<MutexRadixIndex>)->Name("find_matches/mutex-radix")->Apply(find_args);
BENCHMARK(BM_FindMatches<FlatIndex>)->Name("find_matches/flat-hash")->Apply(find_args);
BENCHMARK(BM_FindMatches<PositionalIdx>)->Name("find_matches/positional")->Apply(find_args);
BENCHMARK(BM_FindMatchesWide<KvidxIndex>)->Name("find_matches_wide/kvidx")->Apply(wide_args);
BENCHMARK(BM_FindMatchesWide<MutexRadixIndex>)->Name("find_matches_wide/mutex-radix")->Apply(wide_args);
BENCHMARK(BM_FindMatchesWide<FlatIndex>)->Name("find_matches_wide/flat-hash")->Apply(wide_args);
BENCHMARK(BM_FindMatchesWide<PositionalIdx>)->Name("find_matches_wide/positional")->Apply(wide_args);
BENCHMARK(BM_ApplyStoreRemove<KvidxIndex>)->Name("apply_store_remove_128/kvidx");
BENCHMARK(BM_ApplyStoreRemove<MutexRadixIndex>)->Name("apply_store_remove_128/mutex-radix");
BENCHMARK(BM_ApplyStoreRemove<FlatIndex>)->Name("apply_store_remove_128/flat-hash");
BENCHMARK(BM_ApplyStoreRemove<PositionalIdx>)->Name("apply_store_remove_128/positional");
BENCHMARK(BM_DecodeStored128)->Name("decode/stored_128_blocks");
BENCHMARK(BM_DecodeBatch16x4)->Name("decode/batch_16x4_blocks");

}  // namespace

BENCHMARK_MAIN();
