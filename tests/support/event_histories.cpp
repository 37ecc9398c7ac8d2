#include "tests/support/event_histories.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <variant>

#include "tests/support/event_builders.h"

namespace kvidx::testing {

std::vector<RouterEvent> branching_history(WorkerId w, DpRank r, int n, std::uint64_t seed, unsigned remove_one_in) {
  std::mt19937_64 rng(seed * 7919 + w * 131 + r);
  std::vector<RouterEvent> out;
  const Hashes shared = {1, 2, 3, 4};
  std::vector<Hashes> tails;
  auto stamp = [&](RouterEvent e) {
    e.worker_id = w;
    e.event.dp_rank = r;
    e.event.event_id = out.size();
    out.push_back(std::move(e));
  };
  stamp(make_store_event(w, shared));
  while (static_cast<int>(out.size()) < n) {
    if (!tails.empty() && rng() % remove_one_in == 0) {
      const std::size_t i = rng() % tails.size();
      stamp(make_remove_event_with_parent(w, shared, tails[i]));
      tails.erase(tails.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      Hashes tail;
      tail.push_back(100 + rng() % 16);
      for (int k = 0; k < 3; ++k) tail.push_back(1000 + rng() % 64);
      stamp(make_store_event_with_parent(w, shared, tail));
      tails.push_back(tail);
    }
  }
  return out;
}

Histories branching_histories(WorkerId workers, DpRank ranks, int n, std::uint64_t seed, unsigned remove_one_in) {
  Histories out;
  for (WorkerId w = 1; w <= workers; ++w) {
    for (DpRank r = 0; r < ranks; ++r) out[{w, r}] = branching_history(w, r, n, seed, remove_one_in);
  }
  return out;
}

std::vector<const RouterEvent*> interleave(const Histories& histories) {
  std::vector<const RouterEvent*> out;
  std::size_t longest = 0;
  for (const auto& [stream, events] : histories) longest = std::max(longest, events.size());
  for (std::size_t i = 0; i < longest; ++i) {
    for (const auto& [stream, events] : histories) {
      if (i < events.size()) out.push_back(&events[i]);
    }
  }
  return out;
}

std::set<BlockKey> normal_form(const std::vector<RouterEvent>& dump) {
  std::set<BlockKey> out;
  for (const RouterEvent& e : dump) {
    const auto* s = std::get_if<KvCacheStoreData>(&e.event.data);
    REQUIRE(s != nullptr);
    std::uint64_t parent = s->parent_hash ? s->parent_hash->value : 0;
    for (const auto& b : s->blocks) {
      out.emplace(e.worker_id, e.event.dp_rank, parent, b.block_hash.value, b.tokens_hash.value);
      parent = b.block_hash.value;
    }
  }
  return out;
}

}  // namespace kvidx::testing
