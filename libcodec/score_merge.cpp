#include "libcodec/score_merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace kvidx {
namespace {

template <class Item>
void sort_by_worker(std::vector<Item>& items) {
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.worker < b.worker; });
}

// The first (worker, rank) listed twice in a sorted list, if any.
template <class Item>
std::optional<WorkerWithDpRank> duplicate_worker(const std::vector<Item>& sorted) {
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].worker == sorted[i - 1].worker) return sorted[i].worker;
  }
  return std::nullopt;
}

template <class Item>
void append(std::vector<Item>& to, const std::vector<Item>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

Result<ScoreReply, std::string> merge_score_replies(const std::vector<ScoreReply>& parts) {
  ScoreReply out;
  bool any_combined = false;
  for (const ScoreReply& part : parts) any_combined = any_combined || part.combined_scores.has_value();
  if (any_combined) out.combined_scores.emplace();
  for (const ScoreReply& part : parts) {
    append(out.scores, part.scores);
    append(out.tree_sizes, part.tree_sizes);
    if (out.frequencies.size() < part.frequencies.size()) out.frequencies.resize(part.frequencies.size(), 0);
    for (std::size_t d = 0; d < part.frequencies.size(); ++d) out.frequencies[d] += part.frequencies[d];
    if (part.active_blocks) {
      if (!out.active_blocks) out.active_blocks.emplace();
      append(*out.active_blocks, *part.active_blocks);
    }
    for (const TierScores& tier : part.tier_scores) {
      auto it = std::find_if(out.tier_scores.begin(), out.tier_scores.end(),
                             [&](const TierScores& t) { return t.tier == tier.tier; });
      if (it == out.tier_scores.end()) {
        out.tier_scores.push_back(TierScores{tier.tier, {}});
        it = out.tier_scores.end() - 1;
      }
      append(it->scores, tier.scores);
    }
    if (any_combined) {
      if (part.combined_scores) {
        append(*out.combined_scores, *part.combined_scores);
      } else {
        // NOTE: no combined scores means no lower tier scored and device weight 1 on that shard:
        // each stream's combined score is its device score (query_codec.h).
        for (const WorkerScore& s : part.scores) {
          if (s.score > 0) out.combined_scores->push_back(WorkerCombinedScore{s.worker, static_cast<double>(s.score)});
        }
      }
    }
  }
  sort_by_worker(out.scores);
  sort_by_worker(out.tree_sizes);
  if (out.active_blocks) sort_by_worker(*out.active_blocks);
  if (out.combined_scores) sort_by_worker(*out.combined_scores);
  // Tiers in tier order (kStorageTiers), as make_score_reply lists them.
  std::sort(out.tier_scores.begin(), out.tier_scores.end(),
            [](const TierScores& a, const TierScores& b) { return a.tier < b.tier; });
  for (TierScores& tier : out.tier_scores) sort_by_worker(tier.scores);

  auto overlap = [](const char* field, WorkerWithDpRank w) {
    return fmt::format(
        "{}: worker {} rank {} answered by two shards (the shards overlap: does the server's events mapping "
        "partition into the same number of shards as --shard?)",
        field, w.worker_id, w.dp_rank);
  };
  if (auto w = duplicate_worker(out.scores)) return overlap("scores", *w);
  if (auto w = duplicate_worker(out.tree_sizes)) return overlap("tree_sizes", *w);
  if (out.active_blocks) {
    if (auto w = duplicate_worker(*out.active_blocks)) return overlap("active_blocks", *w);
  }
  for (const TierScores& tier : out.tier_scores) {
    if (auto w = duplicate_worker(tier.scores)) return overlap("tier_scores", *w);
  }
  if (out.combined_scores) {
    if (auto w = duplicate_worker(*out.combined_scores)) return overlap("combined_scores", *w);
  }
  return out;
}

}  // namespace kvidx
