// kvidx-bench synthetic: W workers x depth-D sequences (a tenant's shared system prompt + a body
// shared by several of its workers), >= 1M distinct blocks and >= 10M (worker, block) holdings at
// the default sizes. For every index, in the same run:
//   apply   build the whole tree through 1 lane and through N lanes (events/s, blocks/s)
//   memory  RSS growth of the built index per (block, worker) held and per distinct block, for a
//           fleet whose engines share hashes and for one where every engine hashes its own way
//   latency find_matches of 32/128/1024-block queries, idle and while a writer applies churn
//   writers the 1-lane apply rate of churn while a reader saturates the other core with queries, as a
//           share of the same amount of churn applied idle (are writers starved by readers?)
//   mixed   churn events + find_matches together: (events + requests)/s and find p99
//   snapshot dump the tree as events, restore it into a fresh index
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <string_view>
#include <thread>

#include "bench/app/commands.h"
#include "bench/common/engine_runs.h"
#include "bench/common/report.h"
#include "bench/common/workloads.h"

namespace kvidx::bench {
namespace {

// Stores each part of the index's counted bytes per holding as "counted_<part><suffix>", and
// their sum as "counted_total<suffix>" (nothing for an index without the accounting).
void record_memory_parts(Engine& engine, std::uint64_t holdings, const std::string& suffix, Figures& f) {
  const auto parts = engine.memory_parts();
  if (parts.empty() || holdings == 0) return;
  double total = 0;
  for (const auto& [part, bytes] : parts) {
    const double per_holding = static_cast<double>(bytes) / static_cast<double>(holdings);
    f.values["counted_" + part + suffix] = per_holding;
    total += per_holding;
  }
  f.values["counted_total" + suffix] = total;
}

// Applies all of `churn` in batches (a flush per batch keeps the queues short), publishing progress.
void writer_loop(Engine& engine, const std::vector<RouterEvent>& churn, std::atomic<std::size_t>& applied) {
  constexpr std::size_t kBatch = 1024;
  std::size_t i = 0;
  while (i < churn.size()) {
    const std::size_t end = std::min(churn.size(), i + kBatch);
    for (; i < end; ++i) engine.enqueue(churn[i]);
    engine.flush();
    applied.store(i, std::memory_order_relaxed);
  }
}

}  // namespace

int run_synthetic(const SyntheticArgs& args) {
  SyntheticOptions options;
  options.workers = args.workers;
  options.tenants = args.tenants;
  options.depth = args.depth;
  options.prompt_blocks = args.prompt_blocks;
  options.sequences_per_worker = args.sequences_per_worker;
  options.bodies = args.bodies;
  const auto t_gen = Clock::now();
  SyntheticWorkload workload = make_synthetic(options);
  // Churn for the writers-vs-readers figure, from a copy of the built state: the 1-lane index it
  // runs on is dropped afterwards, so the other indexes never see it.
  std::vector<RouterEvent> starve_idle, starve_busy;
  {
    SyntheticWorkload state = workload;
    state.build = {};
    starve_idle = make_churn(state, std::max<std::size_t>(1, args.churn_pairs / 2));
    starve_busy = make_churn(state, std::max<std::size_t>(1, args.churn_pairs / 2));
  }
  SyntheticOptions per_engine_options = options;
  per_engine_options.per_engine_hashes = true;
  const SyntheticWorkload per_engine_workload = make_synthetic(per_engine_options);
  std::map<std::size_t, std::vector<std::vector<LocalBlockHash>>> queries;
  for (const std::size_t length : {32, 128, 1024})
    queries[length] = make_queries(workload, args.queries, length, length);
  const auto mixed_queries = make_queries(workload, args.mixed_queries, options.depth, 7);
  // NOTE: the churn continues from the build's state; the same churn goes to every index.
  const auto busy_churn = make_churn(workload, args.churn_pairs);
  const auto churn = make_churn(workload, args.churn_pairs);
  std::size_t churn_blocks = 0;
  for (const auto& e : churn) {
    if (const auto* s = std::get_if<KvCacheStoreData>(&e.event.data)) churn_blocks += s->blocks.size();
  }
  std::printf(
      "## synthetic: %zu workers, %zu tenants, depth %zu (prompt %zu), %zu sequences/worker: %zu Stored events, %llu "
      "blocks stored, %llu distinct blocks, %llu (worker, block) holdings; churn %zu events; generated in %.1f s; "
      "load %s\n",
      options.workers, options.tenants, options.depth, options.prompt_blocks, options.sequences_per_worker,
      workload.build.size(), static_cast<unsigned long long>(workload.stored_blocks),
      static_cast<unsigned long long>(workload.distinct_blocks), static_cast<unsigned long long>(workload.holdings),
      churn.size(), seconds_since(t_gen), load_average().c_str());
  std::fflush(stdout);

  std::vector<std::pair<EngineKind, Figures>> results;
  for (const EngineKind kind : args.common.engine_kinds()) {
    Figures f;
    const std::string name = engine_name(kind);
    // apply, 1 lane (then dropped)
    {
      auto engine = make_engine(kind, 1);
      const double s = apply_all(*engine, workload.build);
      f.values["apply1_events"] = static_cast<double>(workload.build.size()) / s;
      f.values["apply1_blocks"] = static_cast<double>(workload.stored_blocks) / s;
      std::fprintf(stderr, "[%s] apply 1 lane: %.2f s\n", name.c_str(), s);
      // Writers vs readers: the same amount of churn through the lane, idle, then while one reader
      // thread queries without pause (on 2 cores: the lane on one, the reader on the other).
      const double idle_s = apply_all(*engine, starve_idle);
      std::atomic<bool> stop{false};
      std::atomic<std::size_t> reads{0};
      std::thread reader([&] {
        const auto& qs = queries.at(128);
        std::size_t i = 0, sink = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          sink += engine->find(qs[i++ % qs.size()]);
          reads.fetch_add(1, std::memory_order_relaxed);
        }
        if (sink == static_cast<std::size_t>(-1)) std::puts("");
      });
      while (reads.load(std::memory_order_relaxed) < 100) std::this_thread::yield();  // the reader is running
      const double busy_s = apply_all(*engine, starve_busy);
      stop.store(true);
      reader.join();
      f.values["writers_idle_events"] = static_cast<double>(starve_idle.size()) / idle_s;
      f.values["writers_busy_events"] = static_cast<double>(starve_busy.size()) / busy_s;
      f.values["writers_busy_pct"] = 100.0 * f.values["writers_busy_events"] / f.values["writers_idle_events"];
      std::fprintf(stderr, "[%s] writers: churn idle %.2f s, while a reader queries %.2f s (%zu queries)\n",
                   name.c_str(), idle_s, busy_s, reads.load());
    }
    release_free_memory();
    const std::size_t rss_before = rss_bytes();
    auto engine = make_engine(kind, args.lanes);
    const double s = apply_all(*engine, workload.build);
    f.values["applyN_events"] = static_cast<double>(workload.build.size()) / s;
    f.values["applyN_blocks"] = static_cast<double>(workload.stored_blocks) / s;
    release_free_memory();
    const double grown = static_cast<double>(rss_bytes()) - static_cast<double>(rss_before);
    f.values["rss_mib"] = grown / (1024.0 * 1024.0);
    f.values["bytes_per_holding"] = grown / static_cast<double>(workload.holdings);
    f.values["bytes_per_distinct"] = grown / static_cast<double>(workload.distinct_blocks);
    f.values["rejected"] = static_cast<double>(engine->rejected());
    record_memory_parts(*engine, workload.holdings, "", f);
    std::fprintf(stderr, "[%s] apply %zu lanes: %.2f s, RSS +%.0f MiB, rejected %zu\n", name.c_str(), args.lanes, s,
                 f.values["rss_mib"], engine->rejected());

    for (const auto& [length, qs] : queries) {
      const auto p = time_queries(*engine, qs);
      f.values[fmt::format("idle{}_p50", length)] = p.p50_us;
      f.values[fmt::format("idle{}_p99", length)] = p.p99_us;
      f.values[fmt::format("idle{}_p999", length)] = p.p999_us;
    }
    // Under writers: one producer applying churn through the lanes while this thread queries.
    {
      std::atomic<std::size_t> applied{0};
      std::thread writer([&] { writer_loop(*engine, busy_churn, applied); });
      for (const auto& [length, qs] : queries) {
        const auto p = time_queries(*engine, qs);
        f.values[fmt::format("busy{}_p50", length)] = p.p50_us;
        f.values[fmt::format("busy{}_p99", length)] = p.p99_us;
        f.values[fmt::format("busy{}_p999", length)] = p.p999_us;
      }
      const std::size_t during = applied.load();
      // NOTE: the whole busy churn is applied (no early stop) so the mixed churn continues from a known state.
      writer.join();
      f.values["busy_churn_applied"] = static_cast<double>(during);
      std::fprintf(stderr, "[%s] latency under writers: %zu of %zu churn events applied meanwhile\n", name.c_str(),
                   during, busy_churn.size());
    }
    {
      std::vector<RouterEvent> churn_copy = churn;
      const std::size_t readers = std::max<std::size_t>(1, args.readers);
      std::vector<std::vector<std::uint32_t>> lat(readers);
      std::atomic<bool> go{false};
      std::vector<std::thread> threads;
      for (std::size_t r = 0; r < readers; ++r) {
        threads.emplace_back([&, r] {
          while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
          std::size_t sink = 0;
          lat[r].reserve(mixed_queries.size() / readers + 1);
          for (std::size_t i = r; i < mixed_queries.size(); i += readers) {
            sink += warm_query(mixed_queries[i]) & 1;
            const auto t0 = Clock::now();
            sink += engine->find(mixed_queries[i]);
            lat[r].push_back(static_cast<std::uint32_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
          }
          if (sink == static_cast<std::size_t>(-1)) std::puts("");
        });
      }
      const auto t0 = Clock::now();
      go.store(true, std::memory_order_release);
      for (auto& e : churn_copy) engine->enqueue(std::move(e));
      engine->flush();
      for (auto& t : threads) t.join();
      const double secs = seconds_since(t0);
      std::vector<std::uint32_t> all;
      for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
      const auto p = percentiles(all);
      f.values["mixed_ops"] = static_cast<double>(churn.size() + mixed_queries.size()) / secs;
      f.values["mixed_p99"] = p.p99_us;
      std::fprintf(stderr, "[%s] mixed: %zu events + %zu queries in %.2f s\n", name.c_str(), churn.size(),
                   mixed_queries.size(), secs);
    }
    if (args.snapshot) {
      auto t0 = Clock::now();
      auto dumped = engine->dump();
      f.values["dump_s"] = seconds_since(t0);
      f.values["dump_events"] = static_cast<double>(dumped.size());
      engine.reset();
      release_free_memory();
      auto restored = make_engine(kind, args.lanes);
      t0 = Clock::now();
      for (auto& e : dumped) restored->enqueue(std::move(e));
      restored->flush();
      f.values["restore_s"] = seconds_since(t0);
      std::fprintf(stderr, "[%s] snapshot: %zu events, dump %.2f s, restore %.2f s\n", name.c_str(), dumped.size(),
                   f.values["dump_s"], f.values["restore_s"]);
    }
    // The same fleet with per-engine hashes (no shared seed): memory only, then dropped. Measured
    // as the shared fleet is (a 1-lane build made and dropped first), so the heap is in like state.
    {
      engine.reset();
      release_free_memory();
      apply_all(*make_engine(kind, 1), per_engine_workload.build);
      release_free_memory();
      const std::size_t before = rss_bytes();
      auto per_engine = make_engine(kind, args.lanes);
      const double secs = apply_all(*per_engine, per_engine_workload.build);
      release_free_memory();
      const double bytes = static_cast<double>(rss_bytes()) - static_cast<double>(before);
      f.values["bytes_per_holding_per_engine"] = bytes / static_cast<double>(per_engine_workload.holdings);
      f.values["rejected_per_engine"] = static_cast<double>(per_engine->rejected());
      record_memory_parts(*per_engine, per_engine_workload.holdings, "_per_engine", f);
      std::fprintf(stderr, "[%s] per-engine hashes: apply %.2f s, RSS +%.0f MiB, rejected %zu\n", name.c_str(), secs,
                   bytes / (1024.0 * 1024.0), per_engine->rejected());
    }
    results.emplace_back(kind, std::move(f));
    release_free_memory();
  }

  Report report("synthetic");
  report.extra()["workload"] = {{"workers", options.workers},
                                {"tenants", options.tenants},
                                {"depth", options.depth},
                                {"prompt_blocks", options.prompt_blocks},
                                {"sequences_per_worker", options.sequences_per_worker},
                                {"stored_events", workload.build.size()},
                                {"stored_blocks", workload.stored_blocks},
                                {"distinct_blocks", workload.distinct_blocks},
                                {"holdings", workload.holdings},
                                {"churn_events", churn.size()},
                                {"churn_blocks", churn_blocks},
                                {"lanes", args.lanes},
                                {"readers", args.readers}};
  auto& raw = report.extra()["raw"] = nlohmann::json::object();
  for (const auto& [kind, f] : results) raw[engine_name(kind)] = f.values;
  auto row = [&](std::string figure, std::string unit, bool higher, const std::string& key) {
    add_engine_row(report, results, std::move(figure), std::move(unit), higher, key);
  };
  row("apply, 1 lane", "events/s", true, "apply1_events");
  row("apply, 1 lane", "blocks/s", true, "apply1_blocks");
  row(fmt::format("apply, {} lanes", args.lanes), "events/s", true, "applyN_events");
  row(fmt::format("apply, {} lanes", args.lanes), "blocks/s", true, "applyN_blocks");
  row("memory: RSS of the built index", "MiB", false, "rss_mib");
  row("memory per (block, worker) held", "bytes", false, "bytes_per_holding");
  row("memory per (block, worker) held, hashes per engine", "bytes", false, "bytes_per_holding_per_engine");
  row("Stored events rejected, hashes per engine", "events", false, "rejected_per_engine");
  row("memory per distinct block", "bytes", false, "bytes_per_distinct");
  for (const char* mode : {"idle", "busy"}) {
    for (const std::size_t length : {32, 128, 1024}) {
      for (const char* q : {"p50", "p99", "p999"}) {
        row(fmt::format("find_matches {}-block, {} {}", length, std::string(mode) == "idle" ? "idle" : "under writers",
                        q),
            "µs", false, fmt::format("{}{}_{}", mode, length, q));
      }
    }
  }
  row("writers: 1-lane churn apply, idle", "events/s", true, "writers_idle_events");
  row("writers: 1-lane churn apply while a reader saturates the other core", "events/s", true, "writers_busy_events");
  row("writers: apply rate under a saturating reader, share of idle", "%", true, "writers_busy_pct");
  row(fmt::format("mixed events+requests ({} lanes, {} readers)", args.lanes, args.readers), "ops/s", true,
      "mixed_ops");
  row("mixed: find_matches p99", "µs", false, "mixed_p99");
  // Where kvidx's bytes go, counted from its structures (no baseline has this accounting).
  for (const auto& [kind, f] : results) {
    if (kind != EngineKind::kvidx) continue;
    for (const auto* suffix : {"", "_per_engine"}) {
      for (const auto& [key, value] : f.values) {
        const std::string_view prefix = "counted_";
        if (!key.starts_with(prefix) || key.ends_with("_per_engine") || !f.values.contains(key + suffix)) {
          continue;
        }
        report.add(Row{fmt::format("memory per (block, worker) held, counted: {}{}", key.substr(prefix.size()),
                                   *suffix == '\0' ? "" : ", hashes per engine"),
                       "bytes",
                       false,
                       f.values.at(key + suffix),
                       {}});
      }
    }
  }
  row("snapshot dump (largest tree)", "s", false, "dump_s");
  row("snapshot restore (largest tree)", "s", false, "restore_s");
  std::printf("\n");
  report.print();
  return report.write_json(args.common.json_dir) ? 0 : 1;
}

}  // namespace kvidx::bench
