// Benchmark bookkeeping: latency percentiles, RSS, and figures printed as table rows (kvidx beside
// each baseline, with the ratio in kvidx's favour) and written as JSON under --json-dir.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvidx::bench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Percentiles {
  std::size_t count = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};
Percentiles percentiles(std::vector<std::uint32_t>& latencies_ns);  // sorts its argument

std::size_t rss_bytes();     // VmRSS from /proc/self/status
void release_free_memory();  // malloc_trim, so RSS deltas measure what is live

std::string machine_description();  // CPU model, cores, memory
std::string load_average();         // /proc/loadavg, first three fields

struct Row {
  std::string figure;
  std::string unit;
  bool higher_is_better = true;
  double kvidx = 0;
  std::vector<std::pair<std::string, double>> baselines;  // (name, value) in the same run
};

// Ratio in kvidx's favour: > 1 means kvidx is better (faster, smaller, quicker).
double advantage(const Row& row, double baseline);
std::string format_value(double value);

class Report {
 public:
  explicit Report(std::string name) : name_(std::move(name)) {}
  void add(Row row) { rows_.push_back(std::move(row)); }
  const std::vector<Row>& rows() const { return rows_; }
  nlohmann::json& extra() { return extra_; }
  // Markdown table of the rows on stdout.
  void print() const;
  // <dir>/<name>.json; returns false (and says why on stderr) on failure.
  bool write_json(const std::string& dir) const;

  static void print_rows(const std::vector<Row>& rows);
  static nlohmann::json row_to_json(const Row& row);
  static Row row_from_json(const nlohmann::json& j);

 private:
  std::string name_;
  std::vector<Row> rows_;
  nlohmann::json extra_ = nlohmann::json::object();
};

}  // namespace kvidx::bench
