#include "bench/common/engine_runs.h"

#include <chrono>
#include <cstdio>

namespace kvidx::bench {

double apply_all(Engine& engine, const std::vector<RouterEvent>& events) {
  std::vector<RouterEvent> copy = events;  // outside the clock
  const auto t0 = Clock::now();
  for (auto& e : copy) engine.enqueue(std::move(e));
  engine.flush();
  return seconds_since(t0);
}

void add_engine_row(Report& report, const std::vector<std::pair<EngineKind, Figures>>& results, std::string figure,
                    std::string unit, bool higher_is_better, const std::string& key) {
  Row r{std::move(figure), std::move(unit), higher_is_better, 0, {}};
  for (const auto& [kind, f] : results) {
    const auto it = f.values.find(key);
    if (it == f.values.end()) return;
    if (kind == EngineKind::kvidx) {
      r.kvidx = it->second;
    } else {
      r.baselines.emplace_back(engine_name(kind), it->second);
    }
  }
  report.add(std::move(r));
}

Percentiles time_queries(const Engine& engine, const std::vector<std::vector<LocalBlockHash>>& queries) {
  std::vector<std::uint32_t> ns;
  ns.reserve(queries.size());
  std::size_t sink = 0;
  for (const auto& q : queries) {
    sink += warm_query(q) & 1;
    const auto t0 = Clock::now();
    sink += engine.find(q);
    ns.push_back(
        static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
  }
  if (sink == static_cast<std::size_t>(-1)) std::puts("");  // keeps the calls from being optimized out
  return percentiles(ns);
}

}  // namespace kvidx::bench
