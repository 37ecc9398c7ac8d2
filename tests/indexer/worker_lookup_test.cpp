// WorkerLookup packs a node pointer and a block depth into one word per bucket: depths round-trip
// at every bit boundary (the deepest through the side map), each entry owns exactly one reference
// to its node through inserts, re-assignments, rehashes, erases, moves and clear.
#include <doctest/doctest.h>

#include <optional>
#include <vector>

#include "libindexer/tree/worker_lookup.h"
#include "tests/support/radix_tree_test_peer.h"

using namespace kvidx;

namespace {

NodeRef make_node() { return NodeRef(new RadixNode(0, {})); }

constexpr std::uint32_t kDepths[] = {0, 1, 7, 8, 9, 0xFFFF, 0x7FFFF - 1, 0x7FFFF, 0x80000, 3'000'000, 0xFFFF'FFFFu};

}  // namespace

TEST_CASE("worker_lookup_round_trips_depths_at_every_packing_boundary") {
  const NodeRef a = make_node();
  const NodeRef b = make_node();
  WorkerLookup lookup;
  for (std::uint64_t i = 0; i < std::size(kDepths); ++i) {
    lookup.insert_or_assign(ExternalSequenceBlockHash{100 + i}, i % 2 ? a : b, kDepths[i]);
  }
  // Enough further entries to rehash several times.
  for (std::uint64_t i = 0; i < 1000; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{5000 + i}, a, 0x80000 + i);
  for (std::uint64_t i = 0; i < std::size(kDepths); ++i) {
    const LookupEntry* entry = lookup.find(ExternalSequenceBlockHash{100 + i});
    REQUIRE(entry != nullptr);
    CHECK(entry->depth == kDepths[i]);
    CHECK(entry->node == (i % 2 ? a : b));
  }
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const LookupEntry* entry = lookup.find(ExternalSequenceBlockHash{5000 + i});
    REQUIRE(entry != nullptr);
    CHECK(entry->depth == 0x80000 + i);
  }
  CHECK(lookup.find(ExternalSequenceBlockHash{99}) == nullptr);

  // A deep entry re-assigned shallow (and back) keeps the right depth.
  lookup.insert_or_assign(ExternalSequenceBlockHash{5000}, b, 3);
  CHECK(lookup.find(ExternalSequenceBlockHash{5000})->depth == 3);
  lookup.insert_or_assign(ExternalSequenceBlockHash{5000}, b, 4'000'000);
  CHECK(lookup.find(ExternalSequenceBlockHash{5000})->depth == 4'000'000);

  std::size_t visited = 0;
  lookup.for_each([&](ExternalSequenceBlockHash hash, const LookupEntry& entry) {
    ++visited;
    if (hash.value >= 100 && hash.value < 100 + std::size(kDepths)) CHECK(entry.depth == kDepths[hash.value - 100]);
  });
  CHECK(visited == lookup.size());
  CHECK(lookup.size() == std::size(kDepths) + 1000);
}

TEST_CASE("worker_lookup_entries_own_one_node_reference_each") {
  const NodeRef a = make_node();
  const NodeRef b = make_node();
  auto refs = [](const NodeRef& n) { return RadixTreeTestPeer::refs(*n); };
  {
    WorkerLookup lookup;
    for (std::uint64_t i = 0; i < 300; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, a, i);
    (void)lookup.find(ExternalSequenceBlockHash{1});  // the handed-out copy holds one more
    CHECK(refs(a) == 1 + 300 + 1);
    for (std::uint64_t i = 0; i < 100; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, b, i + 1);
    (void)lookup.find(ExternalSequenceBlockHash{250});
    CHECK(refs(a) == 1 + 200 + 1);
    CHECK(refs(b) == 1 + 100);
    for (std::uint64_t i = 100; i < 150; ++i) CHECK(lookup.erase(ExternalSequenceBlockHash{i}));
    CHECK_FALSE(lookup.erase(ExternalSequenceBlockHash{100}));
    CHECK(refs(a) == 1 + 150 + 1);

    WorkerLookup moved(std::move(lookup));
    CHECK(refs(a) == 1 + 150 + 1);
    WorkerLookup assigned;
    assigned.insert_or_assign(ExternalSequenceBlockHash{7}, b, 1);
    assigned = std::move(moved);  // drops what `assigned` held
    CHECK(refs(b) == 1 + 100);
    CHECK(assigned.find(ExternalSequenceBlockHash{200})->node == a);
    assigned.clear();
    CHECK(refs(a) == 1);
    CHECK(refs(b) == 1);
    assigned.insert_or_assign(ExternalSequenceBlockHash{1}, a, 0x90000);
    CHECK(refs(a) == 2);
  }
  CHECK(refs(a) == 1);  // the destructor dropped the last entry's reference
  CHECK(refs(b) == 1);
}

TEST_CASE("worker_lookup_runs_take_and_drop_node_references_in_one_step_each") {
  const NodeRef a = make_node();
  const NodeRef b = make_node();
  auto refs = [](const NodeRef& n) { return RadixTreeTestPeer::refs(*n); };
  auto blocks = [](std::uint64_t first, std::uint64_t count) {
    std::vector<StoredBlock> out;
    for (std::uint64_t i = 0; i < count; ++i) {
      out.push_back(StoredBlock{ExternalSequenceBlockHash{first + i}, LocalBlockHash{i}, std::nullopt});
    }
    return out;
  };
  {
    WorkerLookup lookup;
    // Deep enough that part of the run keeps its depths in the side map; enough to rehash.
    lookup.insert_run(blocks(0, 300), a, 0x7FFFF - 100);
    CHECK(refs(a) == 1 + 300);
    CHECK(lookup.peek(ExternalSequenceBlockHash{150})->depth == 0x7FFFF + 50);
    CHECK(lookup.peek(ExternalSequenceBlockHash{150})->node == a.get());
    // Re-stored on the same node (depths move): no new reference; on another node: moved over.
    lookup.insert_run(blocks(0, 100), a, 5);
    CHECK(refs(a) == 1 + 300);
    CHECK(lookup.peek(ExternalSequenceBlockHash{10})->depth == 15);
    lookup.insert_run(blocks(50, 100), b, 1);  // 50 of a's entries move to b, 50 new
    CHECK(refs(a) == 1 + 200);
    CHECK(refs(b) == 1 + 100);
    CHECK(lookup.size() == 300);
    // forget_all drops entries of both nodes and skips unknown hashes and repeats.
    std::vector<ExternalSequenceBlockHash> names;
    for (std::uint64_t i = 40; i < 160; ++i) names.push_back(ExternalSequenceBlockHash{i});
    names.push_back(ExternalSequenceBlockHash{45});
    names.push_back(ExternalSequenceBlockHash{9999});
    lookup.forget_all(names);
    CHECK(refs(a) == 1 + 200 - 20);  // 40-49 and 150-159
    CHECK(refs(b) == 1 + 100 - 100);
    CHECK(lookup.size() == 300 - 120);
    CHECK_FALSE(lookup.peek(ExternalSequenceBlockHash{100}).has_value());
    CHECK(lookup.peek(ExternalSequenceBlockHash{39})->node == a.get());
  }
  CHECK(refs(a) == 1);
  CHECK(refs(b) == 1);
}
