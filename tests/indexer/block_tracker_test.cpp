#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "libindexer/load/block_tracker.h"

namespace kvidx {

// Reaches into the tracker the way the reference's in-module tests do (node ids, running totals,
// owner counts). Declared a friend by BlockTracker and RequestBlockChain; defined only here.
struct BlockTrackerTestPeer {
  static std::size_t node_count(const BlockTracker& t) { return t.arena_.size(); }
  static bool has_node(const BlockTracker& t, PathNodeId id) { return t.arena_.contains(id); }
  static PathNodeId prompt_tail(const RequestBlockChain& chain) {
    REQUIRE(chain.prompt_tail_.has_value());
    return *chain.prompt_tail_;
  }
  static double prompt_total(const BlockTracker& t) { return t.prompt_weight_; }
  static double output_total(const BlockTracker& t) { return t.output_weight_; }
  static bool outputs_empty(const BlockTracker& t) { return t.output_weights_.empty(); }

  static PathNodeId node_id_for(const BlockTracker& t, std::uint64_t hash) {
    std::optional<PathNodeId> found;
    t.arena_.for_each_node([&](PathNodeId id, const PathNode& node) {
      for (const auto h : node.edge) {
        if (h.value == hash) found = id;
      }
    });
    REQUIRE_MESSAGE(found.has_value(), "expected live block hash ", hash);
    return *found;
  }
  static std::uint32_t incoming_for(const BlockTracker& t, std::uint64_t hash) {
    const PathNode& node = t.arena_.node(node_id_for(t, hash));
    return node.liveness.terminal_owners + static_cast<std::uint32_t>(node.children.size());
  }
  static std::optional<double> fraction_for(const BlockTracker& t, std::uint64_t hash) {
    return t.arena_.node(node_id_for(t, hash)).liveness.fraction;
  }
  static void set_terminal_owners(BlockTracker& t, std::uint64_t hash, std::uint32_t owners) {
    t.arena_.node(node_id_for(t, hash)).liveness.terminal_owners = owners;
  }
  static std::set<std::uint64_t> active_hashes(const BlockTracker& t) {
    std::set<std::uint64_t> hashes;
    t.arena_.for_each_node([&](PathNodeId, const PathNode& node) {
      for (const auto h : node.edge) hashes.insert(h.value);
    });
    for (const auto& [h, weight] : t.output_weights_) hashes.insert(h.value);
    return hashes;
  }
};

}  // namespace kvidx

namespace doctest {
template <>
struct StringMaker<std::optional<kvidx::ReleasedPromptPath>> {
  static String convert(const std::optional<kvidx::ReleasedPromptPath>& released) {
    if (!released) return "none";
    std::ostringstream out;
    out << "{path [";
    for (std::size_t i = 0; i < released->path.size() && i < 16; ++i) out << (i ? " " : "") << released->path[i].value;
    if (released->path.size() > 16) out << " ... (" << released->path.size() << " blocks)";
    out << "], remove_from " << released->remove_from << "}";
    return out.str().c_str();
  }
};
}  // namespace doctest

namespace {

using kvidx::BlockTracker;
using kvidx::ExternalSequenceBlockHash;
using kvidx::ReleasedPromptPath;
using kvidx::RequestBlockChain;
using Peer = kvidx::BlockTrackerTestPeer;

std::vector<ExternalSequenceBlockHash> seq(const std::vector<std::uint64_t>& values) {
  std::vector<ExternalSequenceBlockHash> hashes;
  hashes.reserve(values.size());
  for (const auto v : values) hashes.push_back(ExternalSequenceBlockHash{v});
  return hashes;
}

std::optional<ReleasedPromptPath> released(const std::vector<std::uint64_t>& path, std::size_t remove_from) {
  return ReleasedPromptPath{seq(path), remove_from};
}

}  // namespace

TEST_CASE("duplicate_prompt_tracks_terminal_owners") {
  BlockTracker tracker;
  auto [first, first_new] = tracker.acquire_prompt(seq({1, 2, 3}));
  auto [second, second_new] = tracker.acquire_prompt(seq({1, 2, 3}));

  CHECK(first_new == std::optional<std::size_t>{0});
  CHECK(second_new == std::nullopt);
  CHECK(Peer::incoming_for(tracker, 3) == 2);
  CHECK_NOTHROW(tracker.assert_consistent({&first, &second}));
  CHECK(tracker.release(std::move(first)) == std::nullopt);
  CHECK(tracker.release(std::move(second)) == released({1, 2, 3}, 0));
  CHECK_NOTHROW(tracker.assert_consistent({}));
}

TEST_CASE("shorter_prompt_splits_without_invalidating_longer_handle") {
  BlockTracker tracker;
  auto [longer, longer_new] = tracker.acquire_prompt(seq({1, 2, 3, 4}));
  const auto old_tail = Peer::prompt_tail(longer);
  auto [shorter, first_new] = tracker.acquire_prompt(seq({1, 2}));

  CHECK(first_new == std::nullopt);
  CHECK(Peer::prompt_tail(longer) == old_tail);
  CHECK(Peer::has_node(tracker, old_tail));
  CHECK_NOTHROW(tracker.assert_consistent({&longer, &shorter}));
  CHECK(tracker.release(std::move(shorter)) == std::nullopt);
  CHECK(Peer::has_node(tracker, old_tail));
  CHECK(tracker.release(std::move(longer)) == released({1, 2, 3, 4}, 0));
}

TEST_CASE("branch_release_preserves_split_and_survivor_handle") {
  BlockTracker tracker;
  auto [left, left_new] = tracker.acquire_prompt(seq({1, 2, 3}));
  auto [right, first_new] = tracker.acquire_prompt(seq({1, 2, 4}));
  const auto right_tail = Peer::prompt_tail(right);

  CHECK(first_new == std::optional<std::size_t>{2});
  CHECK(tracker.release(std::move(left)) == released({1, 2, 3}, 2));
  CHECK(Peer::node_count(tracker) == 2);
  CHECK(Peer::has_node(tracker, right_tail));
  CHECK_NOTHROW(tracker.assert_consistent({&right}));
  CHECK(tracker.release(std::move(right)) == released({1, 2, 4}, 0));
}

TEST_CASE("longer_prompt_reports_only_the_new_suffix") {
  BlockTracker tracker;
  auto [shorter, shorter_new] = tracker.acquire_prompt(seq({1, 2}));
  auto [longer, first_new] = tracker.acquire_prompt(seq({1, 2, 3, 4}));

  CHECK(first_new == std::optional<std::size_t>{2});
  CHECK(tracker.active_blocks() == 4);
  CHECK(tracker.release(std::move(longer)) == released({1, 2, 3, 4}, 2));
  CHECK(tracker.release(std::move(shorter)) == released({1, 2}, 0));
}

TEST_CASE("output_blocks_stay_outside_prompt_arena") {
  BlockTracker tracker;
  auto [chain, first_new] = tracker.acquire_prompt(seq({1, 2}));
  const auto prompt_nodes = Peer::node_count(tracker);

  CHECK(tracker.append_output(chain, ExternalSequenceBlockHash{42}));
  CHECK(Peer::node_count(tracker) == prompt_nodes);
  CHECK(tracker.active_blocks() == 3);
  CHECK(tracker.contains_block(ExternalSequenceBlockHash{42}));
  CHECK_NOTHROW(tracker.assert_consistent({&chain}));
  CHECK(tracker.release(std::move(chain)) == released({1, 2}, 0));
  CHECK(Peer::outputs_empty(tracker));
  CHECK_FALSE(tracker.contains_block(ExternalSequenceBlockHash{42}));
}

TEST_CASE("fractional_unique_suffix_preserves_shared_prefix") {
  BlockTracker tracker;
  auto [longer, longer_new] = tracker.acquire_prompt(seq({1, 2, 3}));
  auto [shared, shared_new] = tracker.acquire_prompt(seq({1, 2}));

  tracker.set_unique_suffix_fractional(longer, 0.5);
  CHECK(Peer::fraction_for(tracker, 3) == std::optional<double>{0.5});
  CHECK(Peer::fraction_for(tracker, 1) == std::nullopt);
  CHECK(tracker.active_blocks() == 3);
  CHECK(tracker.release(std::move(longer)) == released({1, 2, 3}, 2));
  CHECK(tracker.active_blocks() == 2);
  CHECK(tracker.release(std::move(shared)) == released({1, 2}, 0));
}

TEST_CASE("fraction_mismatch_preserves_split_and_totals") {
  BlockTracker tracker;
  auto [longer, longer_new] = tracker.acquire_prompt(seq({1, 2, 3, 4}));
  const auto longer_tail = Peer::prompt_tail(longer);
  auto [shorter, shorter_new] = tracker.acquire_prompt(seq({1, 2}));

  tracker.set_unique_suffix_fractional(longer, 0.5);
  CHECK(Peer::prompt_total(tracker) == 3.0);
  CHECK(tracker.active_blocks() == 3);

  CHECK(tracker.release(std::move(shorter)) == std::nullopt);
  CHECK(Peer::node_count(tracker) == 2);
  CHECK(Peer::has_node(tracker, longer_tail));
  CHECK(Peer::prompt_total(tracker) == 3.0);
  CHECK_NOTHROW(tracker.assert_consistent({&longer}));

  CHECK(tracker.release(std::move(longer)) == released({1, 2, 3, 4}, 0));
  CHECK(Peer::prompt_total(tracker) == 0.0);
  CHECK(tracker.active_blocks() == 0);
}

TEST_CASE("equal_fractional_edges_remain_split_and_preserve_child_handle") {
  BlockTracker tracker;
  auto [longer, longer_new] = tracker.acquire_prompt(seq({1, 2, 3, 4}));
  const auto longer_tail = Peer::prompt_tail(longer);
  tracker.set_unique_suffix_fractional(longer, 0.5);
  auto [shorter, shorter_new] = tracker.acquire_prompt(seq({1, 2}));

  CHECK(Peer::node_count(tracker) == 2);
  CHECK(Peer::prompt_total(tracker) == 2.0);
  CHECK(tracker.release(std::move(shorter)) == std::nullopt);
  CHECK(Peer::node_count(tracker) == 2);
  CHECK(Peer::has_node(tracker, longer_tail));
  CHECK(Peer::prompt_total(tracker) == 2.0);
  CHECK_NOTHROW(tracker.assert_consistent({&longer}));

  CHECK(tracker.release(std::move(longer)) == released({1, 2, 3, 4}, 0));
  CHECK(Peer::prompt_total(tracker) == 0.0);
}

TEST_CASE("running_totals_follow_prompt_output_and_fraction_lifecycle") {
  BlockTracker tracker;
  auto [left, left_new] = tracker.acquire_prompt(seq({1, 2, 3}));
  auto [right, right_new] = tracker.acquire_prompt(seq({1, 2, 4}));
  auto [duplicate_left, duplicate_new] = tracker.acquire_prompt(seq({1, 2, 3}));

  CHECK(duplicate_new == std::nullopt);
  CHECK(Peer::prompt_total(tracker) == 4.0);
  CHECK(Peer::output_total(tracker) == 0.0);
  CHECK(tracker.release(std::move(duplicate_left)) == std::nullopt);
  CHECK(Peer::prompt_total(tracker) == 4.0);
  CHECK(tracker.append_output(left, ExternalSequenceBlockHash{42}));
  CHECK(Peer::output_total(tracker) == 1.0);
  CHECK(tracker.active_blocks() == 5);

  tracker.set_unique_suffix_fractional(left, 0.5);
  CHECK(Peer::prompt_total(tracker) == 3.5);
  CHECK(Peer::output_total(tracker) == 0.5);
  CHECK(tracker.active_blocks() == 4);

  tracker.set_unique_suffix_fractional(left, 0.25);
  CHECK(Peer::prompt_total(tracker) == 3.25);
  CHECK(Peer::output_total(tracker) == 0.25);
  CHECK(tracker.active_blocks() == 4);
  CHECK_NOTHROW(tracker.assert_consistent({&left, &right}));

  CHECK(tracker.release(std::move(left)) == released({1, 2, 3}, 2));
  CHECK(Peer::prompt_total(tracker) == 3.0);
  CHECK(Peer::output_total(tracker) == 0.0);
  CHECK(tracker.active_blocks() == 3);
  CHECK_NOTHROW(tracker.assert_consistent({&right}));

  CHECK(tracker.release(std::move(right)) == released({1, 2, 4}, 0));
  CHECK(Peer::prompt_total(tracker) == 0.0);
  CHECK(Peer::output_total(tracker) == 0.0);
  CHECK(tracker.active_blocks() == 0);
}

TEST_CASE("output_only_chain_releases_without_membership_delta") {
  BlockTracker tracker;
  auto [chain, first_new] = tracker.acquire_prompt({});
  CHECK(tracker.append_output(chain, ExternalSequenceBlockHash{42}));
  CHECK(first_new == std::nullopt);
  CHECK(tracker.release(std::move(chain)) == std::nullopt);
  CHECK(tracker.active_blocks() == 0);
}

TEST_CASE("randomized_lifecycle_matches_reference_model") {
  constexpr std::size_t kSlots = 32;
  constexpr std::size_t kSteps = 10'000;
  const std::vector<std::vector<std::uint64_t>> prompts = {
      {1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 6}, {1, 7}, {8, 9, 10}, {8, 9, 11}, {12},
  };
  // A fixed-seed engine and explicit reductions keep the run identical on every standard library.
  std::mt19937_64 rng(0x5eed'51a7);
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const auto unit = [&] { return static_cast<double>(rng() >> 11U) * 0x1.0p-53; };

  // The model: each slot's blocks (prompt, then outputs) and how many live requests hold each hash.
  struct Held {
    std::vector<std::uint64_t> blocks;
    std::size_t prompt_depth = 0;
  };
  BlockTracker tracker;
  std::vector<std::optional<RequestBlockChain>> chains(kSlots);
  std::vector<std::optional<Held>> reference(kSlots);
  std::unordered_map<std::uint64_t, std::size_t> counts;
  std::uint64_t next_output = 1'000'000;

  // The first prompt block no other live request holds; absent when all are shared.
  const auto expected_release = [&](const Held& held) -> std::optional<ReleasedPromptPath> {
    const std::vector<std::uint64_t> prompt(held.blocks.begin(),
                                            held.blocks.begin() + static_cast<std::ptrdiff_t>(held.prompt_depth));
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (counts.at(prompt[i]) == 1) return released(prompt, i);
    }
    return std::nullopt;
  };
  const auto release_slot = [&](std::size_t slot) {
    RequestBlockChain chain = std::move(*chains[slot]);
    chains[slot].reset();
    const Held held = std::move(*reference[slot]);
    reference[slot].reset();
    REQUIRE(tracker.release(std::move(chain)) == expected_release(held));
    for (const auto hash : held.blocks) {
      if (--counts.at(hash) == 0) counts.erase(hash);
    }
  };

  for (std::size_t step = 0; step < kSteps; ++step) {
    const std::size_t slot = pick(kSlots);
    if (!chains[slot]) {
      const auto& prompt = prompts[pick(prompts.size())];
      std::optional<std::size_t> expected_first_new;
      for (std::size_t i = 0; i < prompt.size() && !expected_first_new; ++i) {
        if (!counts.contains(prompt[i])) expected_first_new = i;
      }
      auto [chain, first_new] = tracker.acquire_prompt(seq(prompt));
      REQUIRE(first_new == expected_first_new);
      for (const auto hash : prompt) ++counts[hash];
      chains[slot] = std::move(chain);
      reference[slot] = Held{prompt, prompt.size()};
    } else if (unit() < 0.35) {
      const std::uint64_t hash = next_output++;
      REQUIRE(tracker.append_output(*chains[slot], ExternalSequenceBlockHash{hash}));
      reference[slot]->blocks.push_back(hash);
      counts.emplace(hash, 1);
    } else {
      release_slot(slot);
    }

    std::vector<const RequestBlockChain*> live;
    for (const auto& chain : chains) {
      if (chain) live.push_back(&*chain);
    }
    REQUIRE_NOTHROW(tracker.assert_consistent(live));
    std::set<std::uint64_t> expected_hashes;
    for (const auto& [hash, count] : counts) expected_hashes.insert(hash);
    REQUIRE(Peer::active_hashes(tracker) == expected_hashes);
  }

  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    if (chains[slot]) release_slot(slot);
  }
  CHECK_NOTHROW(tracker.assert_consistent({}));
  CHECK(counts.empty());
}

TEST_CASE("ownership_count_overflow_panics") {
  BlockTracker tracker;
  auto [chain, first_new] = tracker.acquire_prompt(seq({1}));
  Peer::set_terminal_owners(tracker, 1, std::numeric_limits<std::uint32_t>::max());
  CHECK_THROWS_WITH_AS(static_cast<void>(tracker.acquire_prompt(seq({1}))), "block ownership count overflowed",
                       std::overflow_error);
  // The failed acquisition changed nothing.
  CHECK(Peer::incoming_for(tracker, 1) == std::numeric_limits<std::uint32_t>::max());
}

TEST_CASE("long_chain_release_is_iterative") {
  constexpr std::size_t kDepth = 65'536;
  std::vector<std::uint64_t> values(kDepth);
  std::iota(values.begin(), values.end(), std::uint64_t{1});
  const auto sequence = seq(values);
  BlockTracker tracker;
  auto [chain, first_new] = tracker.acquire_prompt(sequence);

  CHECK(first_new == std::optional<std::size_t>{0});
  CHECK(Peer::node_count(tracker) == 1);
  CHECK(tracker.active_blocks() == kDepth);
  const auto result = tracker.release(std::move(chain));
  REQUIRE(result.has_value());
  CHECK(result->path == sequence);
  CHECK(result->remove_from == 0);
  CHECK(tracker.active_blocks() == 0);
}

// Beyond the reference: a deep chain made of many split edges (one node per block) still releases
// and reports without recursion.
TEST_CASE("deep_split_chain_release_is_iterative") {
  constexpr std::uint64_t kDepth = 5'000;
  BlockTracker tracker;
  std::vector<std::uint64_t> values(kDepth);
  std::iota(values.begin(), values.end(), std::uint64_t{1});
  std::vector<RequestBlockChain> chains;
  chains.push_back(tracker.acquire_prompt(seq(values)).chain);
  // Every prefix ends at its own split point, so the longest prompt spans kDepth nodes.
  for (std::uint64_t len = kDepth - 1; len >= 1; --len) {
    chains.push_back(
        tracker.acquire_prompt(seq({values.begin(), values.begin() + static_cast<std::ptrdiff_t>(len)})).chain);
  }
  CHECK(Peer::node_count(tracker) == kDepth);
  // Release shortest-first: every prefix release leaves all blocks held by longer prompts.
  for (auto it = chains.rbegin(); it + 1 != chains.rend(); ++it) CHECK(tracker.release(std::move(*it)) == std::nullopt);
  const auto result = tracker.release(std::move(chains.front()));
  REQUIRE(result.has_value());
  CHECK(result->path.size() == kDepth);
  CHECK(result->remove_from == 0);
  CHECK(Peer::node_count(tracker) == 0);
  CHECK_NOTHROW(tracker.assert_consistent({}));
}
