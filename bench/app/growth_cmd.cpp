// kvidx-bench growth: how cost and memory scale with the index, and whether memory stays flat
// under churn.
//   curve  the synthetic fleet (synthetic_cmd.cpp) scaled to 1M, 10M, 100M (worker, block)
//          holdings: apply blocks/s through N lanes, find_matches 128-block p50/p99 idle, RSS and
//          bytes per holding of the built index.
//   churn  prefix churn at a fixed live size: every worker keeps its newest K sequences (LRU);
//          each new sequence shares a random-length prefix with one of P base sequences and ends
//          in fresh blocks, so stores split edges at random depths and removals leave them. RSS is
//          read after warm-up (every worker full) and after `rounds` x the warm-up; an index whose
//          split nodes never merge or are never freed grows here (a known failure of the reference).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <unordered_map>

#include "bench/app/commands.h"
#include "bench/common/engine_runs.h"
#include "bench/common/report.h"
#include "bench/common/workloads.h"
#include "libindexer/hashing.h"

namespace kvidx::bench {
namespace {

// The churn generator: per worker, its held sequences (oldest first) and a count per block it holds.
class PrefixChurn {
 public:
  PrefixChurn(const GrowthArgs& args, std::uint64_t seed) : args_(args), rng_(seed), workers_(args.churn_workers) {
    for (std::size_t b = 0; b < args.churn_bases; ++b) bases_.push_back(fresh(args.churn_depth));
  }

  // One round: a new sequence on a random worker, and its oldest removed when it holds more than K.
  void round(std::vector<RouterEvent>& out) {
    const std::size_t w = std::uniform_int_distribution<std::size_t>(0, workers_.size() - 1)(rng_);
    Worker& worker = workers_[w];
    const auto& base = bases_[std::uniform_int_distribution<std::size_t>(0, bases_.size() - 1)(rng_)];
    const std::size_t shared = std::uniform_int_distribution<std::size_t>(1, args_.churn_depth - 1)(rng_);
    std::vector<LocalBlockHash> locals(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(shared));
    const auto tail = fresh(args_.churn_depth - shared);
    locals.insert(locals.end(), tail.begin(), tail.end());
    const auto externals = compute_sequence_hashes(locals);
    KvCacheStoreData store;
    for (std::size_t i = 0; i < locals.size(); ++i) {
      store.blocks.push_back(StoredBlock{externals[i], locals[i]});
      ++worker.counts[externals[i].value];
    }
    out.push_back(event(w, std::move(store)));
    worker.held.push_back(externals);
    if (worker.held.size() <= args_.churn_keep) return;
    KvCacheRemoveData remove;
    const auto oldest = std::move(worker.held.front());
    worker.held.pop_front();
    for (auto it = oldest.rbegin(); it != oldest.rend(); ++it) {  // deepest first, as engines evict
      if (--worker.counts[it->value] == 0) {
        worker.counts.erase(it->value);
        remove.block_hashes.push_back(*it);
      }
    }
    if (!remove.block_hashes.empty()) out.push_back(event(w, std::move(remove)));
  }

  std::size_t holdings() const {
    std::size_t total = 0;
    for (const auto& w : workers_) total += w.counts.size();
    return total;
  }

 private:
  struct Worker {
    std::deque<std::vector<ExternalSequenceBlockHash>> held;
    std::unordered_map<std::uint64_t, std::uint32_t> counts;
    std::uint64_t next_event_id = 0;
  };

  std::vector<LocalBlockHash> fresh(std::size_t n) {
    std::vector<LocalBlockHash> out(n);
    for (auto& h : out) h.value = rng_();
    return out;
  }
  RouterEvent event(std::size_t w, KvCacheEventData data) {
    return RouterEvent{static_cast<WorkerId>(w), KvCacheEvent{workers_[w].next_event_id++, std::move(data), 0},
                       std::nullopt};
  }

  const GrowthArgs& args_;
  std::mt19937_64 rng_;
  std::vector<Worker> workers_;
  std::vector<std::vector<LocalBlockHash>> bases_;
};

}  // namespace

int run_growth(const GrowthArgs& args) {
  std::vector<std::pair<EngineKind, Figures>> results;
  for (const EngineKind kind : args.common.engine_kinds()) {
    Figures f;
    const std::string name = engine_name(kind);
    for (const double millions : args.sizes) {
      // The synthetic fleet's 10.0M holdings come from 104 sequences per worker; scale them and the bodies.
      SyntheticOptions o;
      o.sequences_per_worker = std::max<std::size_t>(1, static_cast<std::size_t>(10.4 * millions + 0.5));
      o.bodies = std::max<std::size_t>(o.tenants, static_cast<std::size_t>(1060.0 * millions + 0.5));
      auto workload = make_synthetic(o);
      const auto queries = make_queries(workload, args.queries, 128, 128);
      release_free_memory();
      const std::size_t before = rss_bytes();
      auto engine = make_engine(kind, args.lanes);
      const double secs = apply_all(*engine, workload.build);
      release_free_memory();
      const double grown = static_cast<double>(rss_bytes()) - static_cast<double>(before);
      const auto p = time_queries(*engine, queries);
      const std::string key = fmt::format("{:g}M", millions);
      f.values["apply_blocks_" + key] = static_cast<double>(workload.stored_blocks) / secs;
      f.values["rss_mib_" + key] = grown / (1024.0 * 1024.0);
      f.values["bytes_per_holding_" + key] = grown / static_cast<double>(workload.holdings);
      f.values["find128_p50_" + key] = p.p50_us;
      f.values["find128_p99_" + key] = p.p99_us;
      std::fprintf(stderr, "[%s] %s: %llu holdings, apply %.2f s, RSS +%.0f MiB, find 128 p50 %.2f p99 %.2f µs\n",
                   name.c_str(), key.c_str(), static_cast<unsigned long long>(workload.holdings), secs,
                   grown / (1024.0 * 1024.0), p.p50_us, p.p99_us);
      engine.reset();
      release_free_memory();
    }
    if (args.churn_rounds > 0) {
      PrefixChurn churn(args, 99);
      const std::size_t warmup = args.churn_workers * args.churn_keep;
      auto engine = make_engine(kind, args.lanes);
      std::vector<RouterEvent> batch;
      auto run_rounds = [&](std::size_t rounds) {
        for (std::size_t r = 0; r < rounds; ++r) {
          churn.round(batch);
          if (batch.size() >= 4096) {
            for (auto& e : batch) engine->enqueue(std::move(e));
            batch.clear();
          }
        }
        for (auto& e : batch) engine->enqueue(std::move(e));
        batch.clear();
        engine->flush();
        release_free_memory();
        return rss_bytes();
      };
      release_free_memory();
      const std::size_t rss_start = rss_bytes();
      const std::size_t rss_warm = run_rounds(warmup);
      const auto t0 = Clock::now();
      std::size_t rss_end = rss_warm;
      std::string series;  // RSS after each further warm-up's worth of rounds: flat, or growing?
      for (std::size_t i = 0; i < args.churn_rounds; ++i) {
        rss_end = run_rounds(warmup);
        series += fmt::format(" {:.0f}", (static_cast<double>(rss_end) - static_cast<double>(rss_start)) / 1048576.0);
        if (const auto shape = engine->shape(); !shape.empty()) series += " (" + shape + ")";
      }
      const double secs = seconds_since(t0);
      std::fprintf(stderr, "[%s] prefix churn: RSS (MiB over the start) after each warm-up's worth of rounds:%s\n",
                   name.c_str(), series.c_str());
      const double warm_mib = (static_cast<double>(rss_warm) - static_cast<double>(rss_start)) / (1024.0 * 1024.0);
      const double end_mib = (static_cast<double>(rss_end) - static_cast<double>(rss_start)) / (1024.0 * 1024.0);
      f.values["churn_warm_mib"] = warm_mib;
      f.values["churn_end_mib"] = end_mib;
      f.values["churn_growth_pct"] = warm_mib > 0 ? 100.0 * (end_mib - warm_mib) / warm_mib : 0;
      f.values["churn_rejected"] = static_cast<double>(engine->rejected());
      std::fprintf(stderr,
                   "[%s] prefix churn: %zu holdings live; RSS +%.0f MiB after warm-up (%zu rounds), +%.0f MiB after "
                   "%zu more rounds (%.1f s), rejected %zu\n",
                   name.c_str(), churn.holdings(), warm_mib, warmup, end_mib, warmup * args.churn_rounds, secs,
                   engine->rejected());
    }
    results.emplace_back(kind, std::move(f));
  }

  Report report("growth");
  report.extra()["sizes_millions"] = args.sizes;
  report.extra()["churn"] = {{"workers", args.churn_workers}, {"keep", args.churn_keep},
                             {"bases", args.churn_bases},     {"depth", args.churn_depth},
                             {"rounds", args.churn_rounds},   {"lanes", args.lanes}};
  auto row = [&](std::string figure, std::string unit, bool higher, const std::string& key) {
    add_engine_row(report, results, std::move(figure), std::move(unit), higher, key);
  };
  for (const double millions : args.sizes) {
    const std::string key = fmt::format("{:g}M", millions);
    row(fmt::format("growth {} holdings: apply ({} lanes)", key, args.lanes), "blocks/s", true, "apply_blocks_" + key);
    row(fmt::format("growth {} holdings: find_matches 128-block p50", key), "µs", false, "find128_p50_" + key);
    row(fmt::format("growth {} holdings: find_matches 128-block p99", key), "µs", false, "find128_p99_" + key);
    row(fmt::format("growth {} holdings: RSS", key), "MiB", false, "rss_mib_" + key);
    row(fmt::format("growth {} holdings: bytes per holding", key), "bytes", false, "bytes_per_holding_" + key);
  }
  if (args.churn_rounds > 0) {
    row("prefix churn: RSS after warm-up", "MiB", false, "churn_warm_mib");
    row(fmt::format("prefix churn: RSS after {}x the warm-up", args.churn_rounds), "MiB", false, "churn_end_mib");
    row("prefix churn: RSS growth after warm-up", "%", false, "churn_growth_pct");
    row("prefix churn: events rejected", "events", false, "churn_rejected");
  }
  std::printf("\n");
  report.print();
  return report.write_json(args.common.json_dir) ? 0 : 1;
}

}  // namespace kvidx::bench
