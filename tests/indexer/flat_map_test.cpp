// FlatMap: the score result's container. Insertion order is kept but carries no meaning, so
// equality must ignore it.
#include <doctest/doctest.h>

#include <stdexcept>

#include "libindexer/flat_map.h"
#include "libindexer/protocol.h"

using kvidx::FlatMap;
using kvidx::WorkerWithDpRank;

TEST_CASE("flat_map_equality_ignores_insertion_order") {
  FlatMap<WorkerWithDpRank, std::uint32_t> a;
  FlatMap<WorkerWithDpRank, std::uint32_t> b;
  a.append({1, 0}, 3);
  a.append({2, 1}, 5);
  b.append({2, 1}, 5);
  b.append({1, 0}, 3);
  CHECK(a == b);
  b[{1, 0}] = 4;
  CHECK_FALSE(a == b);
  b[{1, 0}] = 3;
  b.append({7, 0}, 1);
  CHECK_FALSE(a == b);
}

TEST_CASE("flat_map_lookups_and_sorted_view") {
  FlatMap<WorkerWithDpRank, std::size_t> m;
  CHECK(m.empty());
  m.append({9, 0}, 90);
  m.append({1, 1}, 11);
  m.append({1, 0}, 10);
  CHECK(m.size() == 3);
  CHECK(m.at({1, 1}) == 11);
  CHECK(m.contains({9, 0}));
  CHECK_FALSE(m.contains({9, 1}));
  CHECK(m.count({1, 0}) == 1);
  CHECK_THROWS_AS((void)m.at({5, 5}), std::out_of_range);
  CHECK_FALSE(m.emplace({1, 0}, 99).second);
  CHECK(m.at({1, 0}) == 10);
  CHECK(m.emplace({4, 0}, 40).second);
  ++m[{3, 0}];
  const auto sorted = m.sorted();
  REQUIRE(sorted.size() == 5);
  CHECK(sorted[0].first == WorkerWithDpRank{1, 0});
  CHECK(sorted[1].first == WorkerWithDpRank{1, 1});
  CHECK(sorted[2] == std::pair<WorkerWithDpRank, std::size_t>{{3, 0}, 1});
  CHECK(sorted[4].first == WorkerWithDpRank{9, 0});
}
