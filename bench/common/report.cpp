#include "bench/common/report.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>

namespace kvidx::bench {

Percentiles percentiles(std::vector<std::uint32_t>& ns) {
  Percentiles p;
  p.count = ns.size();
  if (ns.empty()) return p;
  std::sort(ns.begin(), ns.end());
  const auto at = [&](double q) {
    const auto i = std::min(ns.size() - 1, static_cast<std::size_t>(q * static_cast<double>(ns.size())));
    return static_cast<double>(ns[i]) / 1000.0;
  };
  p.mean_us = std::accumulate(ns.begin(), ns.end(), 0.0) / static_cast<double>(ns.size()) / 1000.0;
  p.p50_us = at(0.50);
  p.p99_us = at(0.99);
  p.p999_us = at(0.999);
  p.max_us = static_cast<double>(ns.back()) / 1000.0;
  return p;
}

std::size_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

void release_free_memory() { malloc_trim(0); }

std::string machine_description() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  const double gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
                     (1024.0 * 1024.0 * 1024.0);
  std::ostringstream out;
  out << model << ", " << std::thread::hardware_concurrency() << " cores, " << std::lround(gib) << " GiB RAM";
  return out.str();
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double advantage(const Row& row, double baseline) {
  if (row.kvidx <= 0 || baseline <= 0) return 0;
  return row.higher_is_better ? row.kvidx / baseline : baseline / row.kvidx;
}

std::string format_value(double v) {
  char buf[64];
  const double a = std::fabs(v);
  if (a >= 1e7) {
    std::snprintf(buf, sizeof buf, "%.1fM", v / 1e6);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof buf, "%.0fk", v / 1e3);
  } else if (a >= 100) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else if (a >= 10) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f", v);
  }
  return buf;
}

namespace {

std::string ratio_text(double r) {
  if (r <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, r >= 10 ? "%.0f×" : "%.2f×", r);
  return buf;
}

}  // namespace

void Report::print_rows(const std::vector<Row>& rows) {
  // One column per baseline, in the order the rows name them (rows without it leave the cell empty).
  std::vector<std::string> columns;
  for (const auto& row : rows) {
    for (const auto& [name, value] : row.baselines) {
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
    }
  }
  std::string header = "| figure | unit | kvidx |";
  std::string rule = "|---|---|---:|";
  for (const auto& name : columns) {
    header.append(" ").append(name).append(" (kvidx ×) |");
    rule += "---:|";
  }
  std::printf("%s\n%s\n", header.c_str(), rule.c_str());
  for (const auto& row : rows) {
    // Appends, not `"literal" + std::string`: GCC 12 at -O3 reports a false -Wrestrict on the latter.
    std::string line = "| ";
    line.append(row.figure).append(" | ").append(row.unit).append(" | ").append(format_value(row.kvidx)).append(" |");
    for (const auto& name : columns) {
      const auto it = std::find_if(row.baselines.begin(), row.baselines.end(),
                                   [&](const auto& baseline) { return baseline.first == name; });
      if (it == row.baselines.end()) {
        line.append(" |");
      } else {
        line.append(" ").append(format_value(it->second)).append(" (");
        line.append(ratio_text(advantage(row, it->second))).append(") |");
      }
    }
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

void Report::print() const { print_rows(rows_); }

nlohmann::json Report::row_to_json(const Row& row) {
  nlohmann::json j{
      {"figure", row.figure}, {"unit", row.unit}, {"higher_is_better", row.higher_is_better}, {"kvidx", row.kvidx}};
  auto& b = j["baselines"] = nlohmann::json::array();
  for (const auto& [name, value] : row.baselines) {
    b.push_back({{"name", name}, {"value", value}, {"kvidx_advantage", advantage(row, value)}});
  }
  return j;
}

Row Report::row_from_json(const nlohmann::json& j) {
  Row row;
  row.figure = j.at("figure").get<std::string>();
  row.unit = j.at("unit").get<std::string>();
  row.higher_is_better = j.at("higher_is_better").get<bool>();
  row.kvidx = j.at("kvidx").get<double>();
  for (const auto& b : j.at("baselines"))
    row.baselines.emplace_back(b.at("name").get<std::string>(), b.at("value").get<double>());
  return row;
}

bool Report::write_json(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  nlohmann::json j = extra_;
  j["bench"] = name_;
  j["machine"] = machine_description();
  j["load_average"] = load_average();
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  j["date"] = date;
  auto& rows = j["rows"] = nlohmann::json::array();
  for (const auto& row : rows_) rows.push_back(row_to_json(row));
  const std::string path = dir + "/" + name_ + ".json";
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) {
    std::fprintf(stderr, "kvidx-bench: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace kvidx::bench
