// kvidx-bench mooncake: the reference's headline benchmark. The Mooncake trace goes through
// `workers` x `copies` simulated LRU workers; the resulting operations (one applied event or one
// find_matches each) are rescaled to the simulated duration and then offered over a benchmark
// window: events by one producer into the index's lanes, requests by `find_matches_concurrency`
// reader threads, each op released at its scheduled instant. A window reports offered ops/s
// (ops / window), achieved ops/s (ops / time until the last op finished and every event was
// applied) and find_matches call latency percentiles.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

#include "bench/app/commands.h"
#include "bench/common/engine_runs.h"
#include "bench/common/report.h"
#include "bench/common/workloads.h"

namespace kvidx::bench {
namespace {

struct WindowResult {
  double window_ms = 0;
  double offered = 0;
  double achieved = 0;
  double elapsed_s = 0;
  Percentiles find;
  std::size_t rejected = 0;
};

WindowResult run_window(EngineKind kind, const MooncakeOps& ops, const MooncakeArgs& args, double window_ms) {
  std::vector<RouterEvent> events = ops.events;  // consumed by the producer; copied outside the clock
  const std::size_t readers = std::max<std::size_t>(1, args.find_matches_concurrency);
  std::vector<std::vector<MooncakeOps::Op>> reader_ops(readers);
  std::vector<MooncakeOps::Op> event_ops;
  event_ops.reserve(ops.events.size());
  std::size_t next_reader = 0;
  for (const auto& op : ops.ops) {
    if (op.is_request) {
      reader_ops[next_reader].push_back(op);
      next_reader = (next_reader + 1) % readers;
    } else {
      event_ops.push_back(op);
    }
  }
  const double scale = window_ms * 1000.0 / static_cast<double>(std::max<std::uint64_t>(1, ops.sim_duration_us));
  auto due = [&](Clock::time_point start, const MooncakeOps::Op& op) {
    return start + std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(op.t_us) * scale * 1000.0));
  };

  auto engine = make_engine(kind, args.lanes);
  std::vector<std::vector<std::uint32_t>> latencies(readers);
  std::vector<Clock::time_point> reader_done(readers);
  std::atomic<bool> go{false};
  Clock::time_point start;
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < readers; ++r) {
    threads.emplace_back([&, r] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      auto& lat = latencies[r];
      lat.reserve(reader_ops[r].size());
      std::size_t sink = 0;
      for (const auto& op : reader_ops[r]) {
        const auto when = due(start, op);
        if (Clock::now() < when) std::this_thread::sleep_until(when);
        const auto& query = ops.requests[op.index];
        sink += warm_query(query) & 1;
        const auto t0 = Clock::now();
        sink += engine->find(query);
        lat.push_back(static_cast<std::uint32_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
      }
      reader_done[r] = Clock::now();
      if (sink == static_cast<std::size_t>(-1)) std::puts("");  // keeps `sink` observable
    });
  }
  start = Clock::now();
  go.store(true, std::memory_order_release);
  for (const auto& op : event_ops) {
    const auto when = due(start, op);
    if (Clock::now() < when) std::this_thread::sleep_until(when);
    engine->enqueue(std::move(events[op.index]));
  }
  engine->flush();
  auto end = Clock::now();
  for (auto& t : threads) t.join();
  for (const auto& d : reader_done) end = std::max(end, d);

  WindowResult w;
  w.window_ms = window_ms;
  const double total = static_cast<double>(ops.ops.size());
  w.elapsed_s = std::chrono::duration<double>(end - start).count();
  w.offered = total / (window_ms / 1000.0);
  w.achieved = total / std::max(w.elapsed_s, window_ms / 1000.0);
  std::vector<std::uint32_t> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  w.find = percentiles(all);
  w.rejected = engine->rejected();
  return w;
}

}  // namespace

int run_mooncake(const MooncakeArgs& args) {
  WorkloadOptions options;
  options.workers = args.workers;
  options.copies = args.copies;
  options.capacity_blocks = args.capacity_blocks;
  options.store_chunk_blocks = args.store_chunk_blocks;
  MooncakeOps ops;
  std::string error;
  const auto t0 = Clock::now();
  if (!make_mooncake_ops(args.trace, options, args.sim_duration_ms, args.max_requests, ops, error)) {
    std::fprintf(stderr, "kvidx-bench mooncake: %s\n", error.c_str());
    return 1;
  }
  std::printf(
      "## mooncake: %zu workers x %zu copies, %llu requests, %zu events (%llu stored / %llu removed, %llu blocks "
      "stored), %zu ops; simulated in %.1f s; lanes %zu, find_matches threads %zu; load %s\n",
      args.workers, args.copies, static_cast<unsigned long long>(ops.stats.requests), ops.events.size(),
      static_cast<unsigned long long>(ops.stats.stored_events),
      static_cast<unsigned long long>(ops.stats.removed_events),
      static_cast<unsigned long long>(ops.stats.stored_blocks), ops.ops.size(), seconds_since(t0), args.lanes,
      args.find_matches_concurrency, load_average().c_str());

  std::vector<double> windows;
  if (args.sweep && args.sweep_steps > 1) {
    // Log-spaced from the longest window to the shortest, like the reference's sweep.
    const double lo = std::log(static_cast<double>(std::max<std::uint64_t>(1, args.sweep_min_ms)));
    const double hi = std::log(static_cast<double>(std::max(args.sweep_max_ms, args.sweep_min_ms)));
    for (std::size_t i = 0; i < args.sweep_steps; ++i) {
      windows.push_back(
          std::round(std::exp(hi - (hi - lo) * static_cast<double>(i) / static_cast<double>(args.sweep_steps - 1))));
    }
  } else {
    windows.push_back(static_cast<double>(args.sim_duration_ms));
  }

  Report report("mooncake");
  auto& sweep_json = report.extra()["windows"] = nlohmann::json::array();
  report.extra()["workload"] = {{"workers", args.workers},
                                {"copies", args.copies},
                                {"requests", ops.stats.requests},
                                {"events", ops.events.size()},
                                {"ops", ops.ops.size()},
                                {"stored_blocks", ops.stats.stored_blocks},
                                {"lanes", args.lanes},
                                {"find_matches_concurrency", args.find_matches_concurrency},
                                {"capacity_blocks", args.capacity_blocks},
                                {"store_chunk_blocks", args.store_chunk_blocks}};
  struct Summary {
    double peak = 0, p99_at_peak = 0, steady_p99 = 0, steady_achieved = 0;
  };
  std::vector<std::pair<EngineKind, Summary>> summaries;
  std::printf(
      "| index | window ms | offered ops/s | achieved ops/s | find p50 µs | find p99 µs | find p999 µs | rejected |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const EngineKind kind : args.common.engine_kinds()) {
    Summary s;
    double steady_gap = 1e300;
    for (const double window : windows) {
      const auto w = run_window(kind, ops, args, window);
      std::printf("| %s | %.0f | %s | %s | %.1f | %.1f | %.1f | %zu |\n", engine_name(kind).c_str(), w.window_ms,
                  format_value(w.offered).c_str(), format_value(w.achieved).c_str(), w.find.p50_us, w.find.p99_us,
                  w.find.p999_us, w.rejected);
      std::fflush(stdout);
      sweep_json.push_back({{"index", engine_name(kind)},
                            {"window_ms", w.window_ms},
                            {"offered_ops_s", w.offered},
                            {"achieved_ops_s", w.achieved},
                            {"elapsed_s", w.elapsed_s},
                            {"find_p50_us", w.find.p50_us},
                            {"find_p99_us", w.find.p99_us},
                            {"find_p999_us", w.find.p999_us},
                            {"rejected", w.rejected}});
      if (w.achieved > s.peak) {
        s.peak = w.achieved;
        s.p99_at_peak = w.find.p99_us;
      }
      const double gap = std::fabs(w.window_ms - static_cast<double>(args.sim_duration_ms));
      if (gap < steady_gap) {
        steady_gap = gap;
        s.steady_p99 = w.find.p99_us;
        s.steady_achieved = w.achieved;
      }
      // Past saturation a window lasts ops / achieved seconds whatever its length and reports the
      // same achieved rate, so the rest of this index's sweep is skipped (see --full-sweep).
      if (!args.full_sweep && w.achieved < 0.5 * w.offered && window != windows.back()) {
        std::printf("| %s | saturated: shorter windows skipped | | | | | | |\n", engine_name(kind).c_str());
        break;
      }
    }
    summaries.emplace_back(kind, s);
  }
  auto row = [&](std::string figure, std::string unit, bool higher, auto get) {
    Row r{std::move(figure), std::move(unit), higher, 0, {}};
    for (const auto& [kind, s] : summaries) {
      if (kind == EngineKind::kvidx) {
        r.kvidx = get(s);
      } else {
        r.baselines.emplace_back(engine_name(kind), get(s));
      }
    }
    report.add(std::move(r));
  };
  const std::string lanes = fmt::format("{} lanes, {} readers", args.lanes, args.find_matches_concurrency);
  row("mooncake peak achieved (" + lanes + ")", "ops/s", true, [](const Summary& s) { return s.peak; });
  row("mooncake find_matches p99 at peak", "µs", false, [](const Summary& s) { return s.p99_at_peak; });
  row(fmt::format("mooncake find_matches p99, {} s window", args.sim_duration_ms / 1000.0), "µs", false,
      [](const Summary& s) { return s.steady_p99; });
  std::printf("\n");
  report.print();
  return report.write_json(args.common.json_dir) ? 0 : 1;
}

}  // namespace kvidx::bench
