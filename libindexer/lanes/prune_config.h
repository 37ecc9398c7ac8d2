// PruneConfig: how long approximate-mode blocks live and how large their trees may grow before
// the oldest-expiring blocks are pruned. Plain value type; validate() reports a bad setting.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>

namespace kvidx {

// Approximate mode records routing decisions as if the chosen worker had stored the blocks.
// A recorded block lives `ttl` after the last decision that named it. When more than
// `max_tree_size` blocks are recorded in total, the oldest-expiring ones are pruned until at most
// floor(max_tree_size * prune_target_ratio) remain. Defaults match the reference router.
struct PruneConfig {
  std::chrono::steady_clock::duration ttl = std::chrono::seconds{120};
  std::size_t max_tree_size = std::size_t{1} << 20;
  double prune_target_ratio = 0.8;

  // Blocks kept after a size-cap prune.
  std::size_t prune_target_size() const {
    return static_cast<std::size_t>(static_cast<double>(max_tree_size) * prune_target_ratio);
  }

  // Absent when every field is usable; otherwise names the first bad field.
  std::optional<std::string> validate() const {
    if (ttl <= std::chrono::steady_clock::duration::zero()) return "ttl must be positive";
    if (max_tree_size == 0) return "max_tree_size must be positive";
    if (!std::isfinite(prune_target_ratio) || prune_target_ratio < 0.0 || prune_target_ratio > 1.0) {
      return "prune_target_ratio must be within [0, 1]";
    }
    return std::nullopt;
  }

  friend bool operator==(const PruneConfig&, const PruneConfig&) = default;
};

}  // namespace kvidx
