#include "libindexer/load/block_tracker.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

namespace kvidx {
namespace {

constexpr EdgeLiveness kOwnedTerminal{1, std::nullopt};

void require(bool condition, const std::string& what) {
  if (!condition) throw std::logic_error("block tracker: " + what);
}

std::vector<ExternalSequenceBlockHash> to_edge(std::span<const ExternalSequenceBlockHash> blocks) {
  return {blocks.begin(), blocks.end()};
}

// Length of the common prefix of `edge` and `prompt` (both start with the same hash).
std::size_t matched_length(std::span<const ExternalSequenceBlockHash> edge,
                           std::span<const ExternalSequenceBlockHash> prompt) {
  const std::size_t probe = std::min(edge.size(), prompt.size());
  // Sequence hashes commit to their prefix, so agreement at the last probed block implies
  // agreement on every block before it; only a disagreement needs the scan.
  if (edge[probe - 1] == prompt[probe - 1]) return probe;
  const auto [edge_end, prompt_end] =
      std::mismatch(edge.begin(), edge.begin() + static_cast<std::ptrdiff_t>(probe), prompt.begin());
  return static_cast<std::size_t>(edge_end - edge.begin());
}

void add_owner(EdgeLiveness& liveness) {
  if (liveness.terminal_owners == std::numeric_limits<std::uint32_t>::max()) {
    throw std::overflow_error("block ownership count overflowed");
  }
  ++liveness.terminal_owners;
}

bool is_live(const PathNode& node) { return node.liveness.terminal_owners != 0 || !node.children.empty(); }

}  // namespace

PromptAcquisition BlockTracker::acquire_prompt(std::span<const ExternalSequenceBlockHash> prompt) {
  if (prompt.empty()) return {RequestBlockChain{}, std::nullopt};

  const auto start = arena_.root(prompt.front());
  if (!start) {
    const PathNodeId tail = arena_.insert_root(to_edge(prompt), kOwnedTerminal);
    prompt_weight_ += static_cast<double>(prompt.size());
    return {RequestBlockChain(tail, prompt.size()), 0};
  }

  PathNodeId at = *start;
  std::size_t depth = 0;  // prompt blocks covered by the edges above `at`
  for (;;) {
    const PathNode& node = arena_.node(at);
    const std::size_t edge_len = node.edge.size();
    const std::size_t matched = matched_length(node.edge, prompt.subspan(depth));

    if (matched < edge_len) {
      // The prompt ends or diverges inside this edge. Split it so the shared part gets its own node;
      // `at` keeps the rest and its id, so chains ending at it stay valid. Both halves keep the
      // edge's fraction, which leaves prompt_weight_ unchanged.
      const std::size_t split_depth = depth + matched;
      const bool ends_at_split = split_depth == prompt.size();
      const PathNodeId prefix =
          arena_.split_keep_suffix(at, matched, EdgeLiveness{ends_at_split ? 1U : 0U, node.liveness.fraction});
      if (ends_at_split) return {RequestBlockChain(prefix, prompt.size()), std::nullopt};

      const PathNodeId tail = arena_.insert_child(prefix, to_edge(prompt.subspan(split_depth)), kOwnedTerminal);
      prompt_weight_ += static_cast<double>(prompt.size() - split_depth);
      return {RequestBlockChain(tail, prompt.size()), split_depth};
    }

    depth += edge_len;
    if (depth == prompt.size()) {
      // NOTE: add_owner throws before changing anything, so an overflow leaves the tracker intact.
      add_owner(arena_.node(at).liveness);
      return {RequestBlockChain(at, prompt.size()), std::nullopt};
    }
    if (const auto next = arena_.child(at, prompt[depth])) {
      at = *next;
      continue;
    }
    const PathNodeId tail = arena_.insert_child(at, to_edge(prompt.subspan(depth)), kOwnedTerminal);
    prompt_weight_ += static_cast<double>(prompt.size() - depth);
    return {RequestBlockChain(tail, prompt.size()), depth};
  }
}

bool BlockTracker::append_output(RequestBlockChain& chain, ExternalSequenceBlockHash hash) {
  // Output blocks are unique per request: a hash live twice would make release double-count.
  if (!output_weights_.emplace(hash, 1.0).second) return false;
  output_weight_ += 1.0;
  chain.output_hashes_.push_back(hash);
  return true;
}

std::optional<ReleasedPromptPath> BlockTracker::release(RequestBlockChain chain) {
  for (const auto hash : chain.output_hashes_) {
    const auto it = output_weights_.find(hash);
    require(it != output_weights_.end(), "released output block is not live");
    output_weight_ -= it->second;
    output_weights_.erase(it);
  }
  // Snap accumulated rounding error away once nothing is left.
  if (output_weights_.empty()) output_weight_ = 0.0;

  if (!chain.prompt_tail_) {
    require(chain.prompt_depth_ == 0, "empty prompt chain kept a depth");
    return std::nullopt;
  }
  const PathNodeId tail = *chain.prompt_tail_;
  require(arena_.contains(tail), "chain does not belong to this tracker");
  EdgeLiveness& terminal = arena_.node(tail).liveness;
  require(terminal.terminal_owners > 0, "terminal ownership underflow");
  --terminal.terminal_owners;
  // Another request still ends here or passes through: no block became absent.
  if (is_live(arena_.node(tail))) return std::nullopt;

  ReleasedPromptPath released;
  released.path.reserve(chain.prompt_depth_);
  for (const PathNodeId id : arena_.path_from_root(tail)) {
    const auto& edge = arena_.node(id).edge;
    released.path.insert(released.path.end(), edge.begin(), edge.end());
  }
  require(released.path.size() == chain.prompt_depth_, "chain depth differs from its arena path");

  // Remove dead nodes bottom-up until one is still owned or still has another child. Edges are
  // never merged back, so ids held by surviving chains remain valid.
  std::size_t removed_blocks = 0;
  for (std::optional<PathNodeId> at = tail; at && !is_live(arena_.node(*at));) {
    const auto parent = arena_.node(*at).parent;
    const PathNode gone = arena_.remove_leaf(*at);
    removed_blocks += gone.edge.size();
    prompt_weight_ -= gone.liveness.weight(gone.edge.size());
    at = parent;
  }
  if (arena_.empty()) prompt_weight_ = 0.0;

  require(removed_blocks > 0 && removed_blocks <= chain.prompt_depth_, "dead prompt suffix has a bad length");
  released.remove_from = chain.prompt_depth_ - removed_blocks;
  return released;
}

void BlockTracker::set_unique_suffix_fractional(const RequestBlockChain& chain, double fraction) {
  if (!std::isfinite(fraction) || fraction < 0.0) {
    throw std::invalid_argument("block tracker: fraction must be finite and non-negative");
  }
  for (const auto hash : chain.output_hashes_) {
    const auto it = output_weights_.find(hash);
    require(it != output_weights_.end(), "chain output block is not live");
    output_weight_ += fraction - std::exchange(it->second, fraction);
  }

  // Walk up while the node has exactly one reason to be live (this chain's terminal, or the single
  // child this walk came from); the first shared node and everything above it keep their weight.
  for (std::optional<PathNodeId> at = chain.prompt_tail_; at;) {
    PathNode& node = arena_.node(*at);
    if (std::size_t{node.liveness.terminal_owners} + node.children.size() != 1) break;
    const double old_fraction = node.liveness.fraction.value_or(1.0);
    prompt_weight_ += static_cast<double>(node.edge.size()) * (fraction - old_fraction);
    node.liveness.fraction = fraction;
    at = node.parent;
  }
}

std::size_t BlockTracker::active_blocks() const {
  const double total = std::round(prompt_weight_ + output_weight_);
  // Rounding drift can leave a tiny negative sum; load is never below zero.
  return total <= 0.0 ? 0 : static_cast<std::size_t>(total);
}

bool BlockTracker::contains_block(ExternalSequenceBlockHash hash) const {
  if (output_weights_.contains(hash)) return true;
  bool found = false;
  arena_.for_each_node([&](PathNodeId, const PathNode& node) {
    found = found || std::find(node.edge.begin(), node.edge.end(), hash) != node.edge.end();
  });
  return found;
}

void BlockTracker::assert_consistent(const std::vector<const RequestBlockChain*>& chains) const {
  arena_.check_topology();

  std::unordered_map<PathNodeId, std::uint32_t, PathNodeIdHasher> expected_owners;
  std::unordered_set<ExternalSequenceBlockHash> expected_outputs;
  for (const RequestBlockChain* chain : chains) {
    if (chain->prompt_tail_) {
      require(arena_.contains(*chain->prompt_tail_), "chain names a dead node");
      std::size_t depth = 0;
      for (const PathNodeId id : arena_.path_from_root(*chain->prompt_tail_)) depth += arena_.node(id).edge.size();
      require(depth == chain->prompt_depth_, "chain prompt depth differs from its arena path");
      ++expected_owners[*chain->prompt_tail_];
    } else {
      require(chain->prompt_depth_ == 0, "empty prompt chain kept a depth");
    }
    for (const auto hash : chain->output_hashes_) {
      require(expected_outputs.insert(hash).second, "output block owned by two chains");
    }
  }

  std::unordered_set<ExternalSequenceBlockHash> prompt_blocks;
  double expected_prompt_weight = 0.0;
  arena_.for_each_node([&](PathNodeId id, const PathNode& node) {
    const auto owners = expected_owners.find(id);
    require(node.liveness.terminal_owners == (owners == expected_owners.end() ? 0U : owners->second),
            "terminal owner count differs from the live chains");
    require(is_live(node), "unowned leaf left in the arena");
    for (const auto hash : node.edge) require(prompt_blocks.insert(hash).second, "prompt block appears twice");
    expected_prompt_weight += node.liveness.weight(node.edge.size());
  });

  require(output_weights_.size() == expected_outputs.size(), "output map differs from the chains' outputs");
  double expected_output_weight = 0.0;
  for (const auto& [hash, weight] : output_weights_) {
    require(expected_outputs.contains(hash), "output map holds a block no chain owns");
    expected_output_weight += weight;
  }

  const auto close = [](double actual, double expected) {
    return std::abs(actual - expected) <= 1e-9 * std::max({std::abs(actual), std::abs(expected), 1.0});
  };
  require(close(prompt_weight_, expected_prompt_weight),
          "prompt running total " + std::to_string(prompt_weight_) + " != " + std::to_string(expected_prompt_weight));
  require(close(output_weight_, expected_output_weight),
          "output running total " + std::to_string(output_weight_) + " != " + std::to_string(expected_output_weight));
  require(!arena_.empty() || prompt_weight_ == 0.0, "drained prompt total is not zero");
  require(!output_weights_.empty() || output_weight_ == 0.0, "drained output total is not zero");
  const double reconstructed = std::round(expected_prompt_weight + expected_output_weight);
  require(active_blocks() == (reconstructed <= 0.0 ? 0 : static_cast<std::size_t>(reconstructed)),
          "constant-time active block count differs from the reconstructed weight");
}

}  // namespace kvidx
