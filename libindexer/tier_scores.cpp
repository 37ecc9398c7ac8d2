#include "libindexer/tier_scores.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace kvidx {

namespace {

constexpr double kMaxWeight = 1000.0;

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

std::optional<TierWeights> parse_tier_weights(std::string_view text, std::string& error) {
  TierWeights weights;
  if (trim(text).empty()) {
    error = "empty tier weights (expected e.g. host_pinned=0.75,disk=0.25)";
    return std::nullopt;
  }
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      // NOTE: fmt, not std::string operations: GCC 12 at -O3 (Release) warns -Wrestrict on those.
      error = fmt::format("'{}': expected TIER=WEIGHT", entry);
      return std::nullopt;
    }
    const std::string_view name = trim(entry.substr(0, eq));
    const auto tier = storage_tier_from_string(name);
    if (!tier) {
      error = fmt::format("unknown tier '{}' (expected device, host_pinned, disk or external)", name);
      return std::nullopt;
    }
    // The whole value must be a number: "0.5x" is refused, not read as 0.5.
    const std::string value(trim(entry.substr(eq + 1)));
    std::size_t used = 0;
    double weight = -1;
    try {
      weight = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size() || !std::isfinite(weight) || weight < 0 || weight > kMaxWeight) {
      error = fmt::format("tier {}: bad weight '{}' (expected a number from 0 to 1000)", name, value);
      return std::nullopt;
    }
    weights.by_tier[tier_index(*tier)] = weight;
  }
  return weights;
}

std::string format_tier_weights(const TierWeights& weights) {
  std::string out;
  for (const StorageTier tier : kStorageTiers) {
    if (!out.empty()) out += ',';
    char buffer[32];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, weights.of(tier));
    out += fmt::format("{}={}", to_string(tier), std::string_view(buffer, ec == std::errc{} ? end : buffer));
  }
  return out;
}

bool TieredOverlapScores::any_lower() const {
  return std::any_of(lower.begin(), lower.end(), [](const auto& scores) { return !scores.empty(); });
}

const FlatMap<WorkerWithDpRank, std::uint32_t>& TieredOverlapScores::scores_of(StorageTier tier) const {
  return tier == StorageTier::device ? device.scores : lower[tier_index(tier) - 1];
}

FlatMap<WorkerWithDpRank, double> combined_scores(const TieredOverlapScores& scores, const TierWeights& weights) {
  // (stream, weight, score) for every tier's score; grouped by stream, best weight first.
  std::vector<std::tuple<WorkerWithDpRank, double, std::uint32_t>> rows;
  for (const StorageTier tier : kStorageTiers) {
    const double weight = weights.of(tier);
    if (weight <= 0) continue;
    for (const auto& [stream, score] : scores.scores_of(tier)) {
      if (score > 0) rows.emplace_back(stream, weight, score);
    }
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
    return std::get<1>(a) > std::get<1>(b);
  });
  FlatMap<WorkerWithDpRank, double> out;
  for (std::size_t i = 0; i < rows.size();) {
    const WorkerWithDpRank stream = std::get<0>(rows[i]);
    // Positions below `counted` already took a better tier's weight.
    std::uint32_t counted = 0;
    double combined = 0;
    for (; i < rows.size() && std::get<0>(rows[i]) == stream; ++i) {
      const auto [_, weight, score] = rows[i];
      if (score > counted) {
        combined += weight * (score - counted);
        counted = score;
      }
    }
    out.append(stream, combined);
  }
  return out;
}

}  // namespace kvidx
