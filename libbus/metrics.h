// A small Prometheus metrics registry: counters, gauges, callback gauges (read at scrape time) and
// fixed-bucket histograms, rendered in the Prometheus text exposition format (version 0.0.4).
// Updates are lock-free atomics; registration and rendering take a mutex. References returned by
// the registry stay valid for the registry's lifetime.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kvidx::bus {

// Label pairs in the order given, e.g. {{"type","stored"},{"result","applied"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(std::uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Cumulative counts per bound (then +Inf), total count and sum.
  std::vector<std::uint64_t> cumulative_counts() const;
  std::uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // one per bound plus +Inf
  std::atomic<std::uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Default latency buckets in seconds: 50 us .. 1 s.
std::vector<double> latency_buckets_seconds();

class MetricsRegistry {
 public:
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // A gauge computed when scraped (tree size, lane depth, ...). `fn` must be thread-safe.
  void gauge_callback(const std::string& name, const std::string& help, const Labels& labels,
                      std::function<double()> fn);
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> upper_bounds,
                       const Labels& labels = {});

  std::string render() const;

 private:
  enum class Type : std::uint8_t { counter, gauge, histogram };
  struct Series {
    std::string labels;  // rendered: {a="b",c="d"} or empty
    Counter* counter = nullptr;
    Gauge* gauge = nullptr;
    Histogram* histogram = nullptr;
    std::function<double()> callback;
  };
  struct Family {
    Type type = Type::counter;
    std::string help;
    std::vector<Series> series;
  };

  Family& family(const std::string& name, const std::string& help, Type type);
  Series* find_series(Family& family, const std::string& labels);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  std::deque<Counter> counters_;
  std::deque<Gauge> gauges_;
  std::deque<Histogram> histograms_;
};

// {a="b",c="d"} with Prometheus escaping; empty for no labels.
std::string render_labels(const Labels& labels);

}  // namespace kvidx::bus
