// kvidx-bench summary: every figure of <json-dir>/{mooncake,synthetic,replay,e2e}.json and micro-gbench.json in one
// table.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "bench/app/commands.h"
#include "bench/common/report.h"

namespace kvidx::bench {

int run_summary(const std::string& json_dir) {
  std::vector<Row> rows;
  std::string loads;
  std::string machine;
  for (const char* name : {"mooncake", "synthetic", "replay", "e2e", "growth"}) {
    const auto path = std::filesystem::path(json_dir) / (std::string(name) + ".json");
    std::ifstream in(path);
    if (!in) continue;
    try {
      const auto j = nlohmann::json::parse(in);
      if (j.contains("machine")) machine = j["machine"].get<std::string>();
      if (j.contains("load_average"))
        loads += std::string(loads.empty() ? "" : ", ") + name + " " + j["load_average"].get<std::string>();
      for (const auto& r : j.at("rows")) rows.push_back(Report::row_from_json(r));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvidx-bench summary: %s: %s\n", path.c_str(), e.what());
      return 1;
    }
  }
  // Google Benchmark's own JSON (scripts/bench writes it as micro-gbench.json): mean time per
  // find_matches, items/s of apply and decode, kvidx beside the baselines of the same name.
  const auto gbench = std::filesystem::path(json_dir) / "micro-gbench.json";
  if (std::ifstream in(gbench); in) {
    try {
      const auto j = nlohmann::json::parse(in);
      std::map<std::string, std::map<std::string, double>> by_case;  // case -> index -> value
      std::map<std::string, std::pair<std::string, bool>> units;
      for (const auto& b : j.at("benchmarks")) {
        const auto name = b.at("name").get<std::string>();
        const auto slash = name.find('/');
        const auto kind = name.substr(0, slash);
        std::string rest = name.substr(slash + 1);
        const auto next = rest.find('/');
        const std::string index = next == std::string::npos ? rest : rest.substr(0, next);
        std::string params = next == std::string::npos ? "" : rest.substr(next + 1);
        if (const auto rt = params.find("/real_time"); rt != std::string::npos) params.erase(rt);
        if (kind == "find_matches" || kind == "find_matches_wide") {
          const std::string what = kind == "find_matches" ? "" : ", a prompt every stream holds,";
          const std::string key = "micro find_matches" + what + " " + params + " (mean)";
          by_case[key][index] = b.at("real_time").get<double>() / 1000.0;  // ns -> µs
          units[key] = {"µs", false};
        } else if (kind == "apply_store_remove_128") {
          const std::string key = "micro apply 128-block Stored+Removed";
          by_case[key][index] = b.at("items_per_second").get<double>();
          units[key] = {"events/s", true};
        } else if (kind == "decode") {
          const std::string key = "micro decode " + index;
          by_case[key]["kvidx"] = b.at("items_per_second").get<double>();
          units[key] = {"events/s", true};
        }
      }
      for (const auto& [key, values] : by_case) {
        Row row{key, units[key].first, units[key].second, 0, {}};
        if (const auto it = values.find("kvidx"); it != values.end()) row.kvidx = it->second;
        for (const char* baseline : {"mutex-radix", "flat-hash", "positional"}) {
          if (const auto it = values.find(baseline); it != values.end())
            row.baselines.emplace_back(baseline, it->second);
        }
        rows.push_back(std::move(row));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvidx-bench summary: %s: %s\n", gbench.c_str(), e.what());
      return 1;
    }
  }
  std::printf(
      "Machine: %s. Load average (1/5/15 min) as each part finished: %s.\n"
      "Each baseline cell: its value and kvidx's advantage (> 1× means kvidx is better).\n\n",
      machine.c_str(), loads.c_str());
  Report::print_rows(rows);
  return rows.empty() ? 1 : 0;
}

}  // namespace kvidx::bench
