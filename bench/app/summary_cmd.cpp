// kvidx-bench summary: every figure of <json-dir>/{mooncake,synthetic,replay,e2e,micro}.json in one table.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/app/commands.h"
#include "bench/common/report.h"

namespace kvidx::bench {

int run_summary(const std::string& json_dir) {
  std::vector<Row> rows;
  std::string loads;
  std::string machine;
  for (const char* name : {"mooncake", "synthetic", "replay", "e2e", "micro"}) {
    const auto path = std::filesystem::path(json_dir) / (std::string(name) + ".json");
    std::ifstream in(path);
    if (!in) continue;
    try {
      const auto j = nlohmann::json::parse(in);
      if (j.contains("machine")) machine = j["machine"].get<std::string>();
      if (j.contains("load_average")) loads += std::string(loads.empty() ? "" : ", ") + name + " " + j["load_average"].get<std::string>();
      for (const auto& r : j.at("rows")) rows.push_back(Report::row_from_json(r));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvidx-bench summary: %s: %s\n", path.c_str(), e.what());
      return 1;
    }
  }
  std::printf("Machine: %s. Load average (1/5/15 min) as each part finished: %s.\n"
              "Each baseline cell: its value and kvidx's advantage (> 1× means kvidx is better).\n\n",
              machine.c_str(), loads.c_str());
  Report::print_rows(rows);
  return rows.empty() ? 1 : 0;
}

}  // namespace kvidx::bench
