#include "libbus/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvidx::bus {
namespace {

std::string escape_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<std::int64_t>(v));
  return fmt::format("{}", v);
}

// Adds one label to an already rendered label set.
std::string with_label(const std::string& labels, const std::string& key, const std::string& value) {
  const std::string extra = fmt::format("{}=\"{}\"", key, value);
  if (labels.empty()) return "{" + extra + "}";
  return labels.substr(0, labels.size() - 1) + "," + extra + "}";
}

}  // namespace

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return {};
  std::string out = "{";
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ',';
    out += labels[i].first;
    out += "=\"";
    out += escape_label(labels[i].second);
    out += '"';
  }
  out += '}';
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  buckets_ = std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1);
  for (std::size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  buckets_[static_cast<std::size_t>(it - bounds_.begin())].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  double old = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(old, old + value, std::memory_order_relaxed)) {
  }
}

std::vector<std::uint64_t> Histogram::cumulative_counts() const {
  std::vector<std::uint64_t> out(bounds_.size() + 1);
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

std::vector<double> latency_buckets_seconds() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0};
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help, Type type) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  } else if (it->second.type != type) {
    throw std::logic_error("metric " + name + " registered with two types");
  }
  return it->second;
}

MetricsRegistry::Series* MetricsRegistry::find_series(Family& fam, const std::string& labels) {
  for (auto& s : fam.series) {
    if (s.labels == labels) return &s;
  }
  return nullptr;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& fam = family(name, help, Type::counter);
  const std::string rendered = render_labels(labels);
  if (Series* s = find_series(fam, rendered); s != nullptr && s->counter != nullptr) return *s->counter;
  Counter& c = counters_.emplace_back();
  fam.series.push_back(Series{rendered, &c, nullptr, nullptr, {}});
  return c;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& fam = family(name, help, Type::gauge);
  const std::string rendered = render_labels(labels);
  if (Series* s = find_series(fam, rendered); s != nullptr && s->gauge != nullptr) return *s->gauge;
  Gauge& g = gauges_.emplace_back();
  fam.series.push_back(Series{rendered, nullptr, &g, nullptr, {}});
  return g;
}

void MetricsRegistry::gauge_callback(const std::string& name, const std::string& help, const Labels& labels,
                                     std::function<double()> fn) {
  std::lock_guard lock(mutex_);
  Family& fam = family(name, help, Type::gauge);
  const std::string rendered = render_labels(labels);
  if (Series* s = find_series(fam, rendered); s != nullptr) {
    s->callback = std::move(fn);
    return;
  }
  fam.series.push_back(Series{rendered, nullptr, nullptr, nullptr, std::move(fn)});
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      std::vector<double> upper_bounds, const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& fam = family(name, help, Type::histogram);
  const std::string rendered = render_labels(labels);
  if (Series* s = find_series(fam, rendered); s != nullptr && s->histogram != nullptr) return *s->histogram;
  Histogram& h = histograms_.emplace_back(std::move(upper_bounds));
  fam.series.push_back(Series{rendered, nullptr, nullptr, &h, {}});
  return h;
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& [name, fam] : families_) {
    const char* type = fam.type == Type::counter ? "counter" : fam.type == Type::gauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, fam.help, name, type);
    for (const auto& s : fam.series) {
      if (s.counter != nullptr) {
        out += fmt::format("{}{} {}\n", name, s.labels, s.counter->value());
      } else if (s.gauge != nullptr) {
        out += fmt::format("{}{} {}\n", name, s.labels, format_value(s.gauge->value()));
      } else if (s.callback) {
        out += fmt::format("{}{} {}\n", name, s.labels, format_value(s.callback()));
      } else if (s.histogram != nullptr) {
        const auto counts = s.histogram->cumulative_counts();
        const auto& bounds = s.histogram->upper_bounds();
        for (std::size_t i = 0; i < bounds.size(); ++i) {
          out += fmt::format("{}_bucket{} {}\n", name, with_label(s.labels, "le", format_value(bounds[i])), counts[i]);
        }
        out += fmt::format("{}_bucket{} {}\n", name, with_label(s.labels, "le", "+Inf"), counts.back());
        out += fmt::format("{}_sum{} {}\n", name, s.labels, format_value(s.histogram->sum()));
        out += fmt::format("{}_count{} {}\n", name, s.labels, counts.back());
      }
    }
  }
  return out;
}

}  // namespace kvidx::bus
