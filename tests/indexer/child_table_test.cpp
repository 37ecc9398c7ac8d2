// ChildTable: a node's children by first local hash. Past eight children it keeps an open-addressing
// index over its vector; inserts and erases (swap-with-last, backward-shift in the index) must keep
// every child findable across the switch between scanning and indexing, both ways.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <vector>

#include "libindexer/tree/radix_node.h"

using namespace kvidx;

namespace {

NodeRef make_node() { return NodeRef(new RadixNode(0, {})); }

void check_same(const ChildTable& table, const std::map<std::uint64_t, RadixNode*>& model,
                const std::vector<std::uint64_t>& keys) {
  REQUIRE(table.size() == model.size());
  for (const auto key : keys) {
    const auto it = model.find(key);
    RadixNode* found = table.find(LocalBlockHash{key});
    CHECK(found == (it == model.end() ? nullptr : it->second));
  }
}

}  // namespace

TEST_CASE("child table finds every child through random inserts and erases, scanned and indexed") {
  for (const std::uint64_t stride : {std::uint64_t{1}, std::uint64_t{1} << 40, std::uint64_t{0x9E3779B97F4A7C15}}) {
    std::mt19937_64 rng(stride);
    std::vector<std::uint64_t> keys;
    for (std::uint64_t i = 0; i < 400; ++i) keys.push_back(i * stride + 1);  // sequential or clustered keys
    ChildTable table;
    std::map<std::uint64_t, RadixNode*> model;
    std::vector<NodeRef> nodes;
    for (int step = 0; step < 6000; ++step) {
      const std::uint64_t key = keys[rng() % keys.size()];
      // Grow for a while, then shrink below the scan limit, then grow again.
      const bool grow = (step / 1500) % 2 == 0 ? rng() % 4 != 0 : rng() % 4 == 0;
      if (grow && !model.contains(key)) {
        nodes.push_back(make_node());
        table.insert(LocalBlockHash{key}, nodes.back());
        model[key] = nodes.back().get();
      } else if (!grow) {
        const NodeRef removed = table.erase(LocalBlockHash{key});
        const auto it = model.find(key);
        CHECK(removed.get() == (it == model.end() ? nullptr : it->second));
        if (it != model.end()) model.erase(it);
      }
      if (step % 97 == 0) check_same(table, model, keys);
    }
    check_same(table, model, keys);
    const auto all = table.take_all();
    CHECK(all.size() == model.size());
    CHECK(table.empty());
    CHECK(table.find(LocalBlockHash{keys[0]}) == nullptr);
  }
}
