// WorkerLookup packs a node pointer and a block depth into one word per bucket: depths round-trip
// at every bit boundary (the deepest through the side map), each entry owns exactly one reference
// to its node through inserts, re-assignments, rehashes, erases, moves and clear; dropped marks share
// the buckets and own none.
#include <doctest/doctest.h>

#include <algorithm>
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

TEST_CASE("worker_lookup_dropped_marks_live_in_buckets_and_own_no_reference") {
  const NodeRef a = make_node();
  const NodeRef b = make_node();
  auto refs = [](const NodeRef& n) { return RadixTreeTestPeer::refs(*n); };
  {
    WorkerLookup lookup;
    for (std::uint64_t i = 0; i < 100; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, a, 0x7FFFF + i);
    // A scrubbed entry becomes a mark: not found, dropped, its reference (and deep depth) gone.
    for (std::uint64_t i = 0; i < 40; ++i) lookup.scrub_dropped(ExternalSequenceBlockHash{i});
    lookup.scrub_dropped(ExternalSequenceBlockHash{5});     // a mark stays a mark
    lookup.scrub_dropped(ExternalSequenceBlockHash{9999});  // unknown: no mark
    CHECK(refs(a) == 1 + 60);
    CHECK(lookup.size() == 60);
    CHECK(lookup.dropped_size() == 40);
    CHECK(lookup.find(ExternalSequenceBlockHash{5}) == nullptr);
    CHECK_FALSE(lookup.peek(ExternalSequenceBlockHash{5}).has_value());
    CHECK(lookup.was_dropped(ExternalSequenceBlockHash{5}));
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{50}));
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{9999}));
    std::size_t visited = 0;
    lookup.for_each([&](ExternalSequenceBlockHash hash, const LookupEntry&) {
      ++visited;
      CHECK(hash.value >= 40);
    });
    CHECK(visited == 60);

    // Marks and entries survive rehashes (probe runs through marks stay intact).
    for (std::uint64_t i = 1000; i < 3000; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, b, 1);
    for (std::uint64_t i = 0; i < 40; ++i) CHECK(lookup.was_dropped(ExternalSequenceBlockHash{i}));
    for (std::uint64_t i = 40; i < 100; ++i) CHECK(lookup.find(ExternalSequenceBlockHash{i})->depth == 0x7FFFF + i);

    // Stored again: the mark is lifted and the entry holds a reference again.
    lookup.insert_or_assign(ExternalSequenceBlockHash{3}, b, 2);
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{3}));
    CHECK(lookup.find(ExternalSequenceBlockHash{3})->node == b);
    std::vector<StoredBlock> run;
    for (std::uint64_t i = 10; i < 20; ++i) run.push_back(StoredBlock{{i}, {i}, std::nullopt});
    lookup.insert_run(run, a, 7);
    CHECK(lookup.peek(ExternalSequenceBlockHash{12})->depth == 9);
    CHECK(lookup.dropped_size() == 40 - 11);
    CHECK(lookup.size() == 60 + 2000 + 11);
    CHECK(refs(a) == 1 + 60 + 10);

    // Naming a block (Removed) erases its mark or entry; erase says which it was.
    const ExternalSequenceBlockHash named[] = {{20}, {21}, {50}, {9999}};
    lookup.forget_all(named);
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{20}));
    CHECK(lookup.find(ExternalSequenceBlockHash{50}) == nullptr);
    CHECK(lookup.dropped_size() == 40 - 11 - 2);
    CHECK_FALSE(lookup.erase(ExternalSequenceBlockHash{22}));  // a mark
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{22}));
    CHECK(lookup.erase(ExternalSequenceBlockHash{51}));  // an entry
    CHECK(refs(a) == 1 + 60 + 10 - 2);
    // Every other mark and entry is still found after the backward shifts of those erases.
    for (std::uint64_t i = 23; i < 40; ++i) CHECK(lookup.was_dropped(ExternalSequenceBlockHash{i}));
    for (std::uint64_t i = 52; i < 100; ++i) CHECK(lookup.find(ExternalSequenceBlockHash{i})->node == a);

    // clear() drops entries and marks but keeps the buckets for the stream's next stores (the
    // deep depths' side map, emptied first, is not counted in either figure).
    std::vector<ExternalSequenceBlockHash> deep;
    for (std::uint64_t i = 40; i < 100; ++i) deep.push_back(ExternalSequenceBlockHash{i});
    lookup.forget_all(deep);
    const std::size_t bytes = lookup.chunk_bytes();
    lookup.clear();
    CHECK(lookup.size() == 0);
    CHECK(lookup.dropped_size() == 0);
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{30}));
    CHECK(lookup.chunk_bytes() == bytes);
    CHECK(refs(a) == 1);
    CHECK(refs(b) == 1);
  }
  CHECK(refs(a) == 1);
}

TEST_CASE("worker_lookup_take_nodes_hands_over_each_node_once_and_empties_the_lookup") {
  const NodeRef a = make_node();
  const NodeRef b = make_node();
  const NodeRef c = make_node();
  auto refs = [](const NodeRef& n) { return RadixTreeTestPeer::refs(*n); };
  WorkerLookup lookup;
  for (std::uint64_t i = 0; i < 500; ++i) {
    lookup.insert_or_assign(ExternalSequenceBlockHash{i}, i % 3 == 0 ? a : (i % 3 == 1 ? b : c), i);
  }
  lookup.scrub_dropped(ExternalSequenceBlockHash{2});
  lookup.insert_or_assign(ExternalSequenceBlockHash{10'000}, c, 0x90000);  // a deep depth too
  {
    std::vector<NodeRef> nodes = lookup.take_nodes();
    CHECK(lookup.size() == 0);
    CHECK(lookup.dropped_size() == 0);
    CHECK(lookup.find(ExternalSequenceBlockHash{3}) == nullptr);
    REQUIRE(nodes.size() == 3);
    std::vector<RadixNode*> got;
    for (const auto& node : nodes) got.push_back(node.get());
    std::sort(got.begin(), got.end());
    std::vector<RadixNode*> want{a.get(), b.get(), c.get()};
    std::sort(want.begin(), want.end());
    CHECK(got == want);
    CHECK(refs(a) == 2);  // the test's and the one handed over
    CHECK(refs(b) == 2);
    CHECK(refs(c) == 2);
  }
  CHECK(refs(a) == 1);
  CHECK(refs(c) == 1);
  CHECK(lookup.take_nodes().empty());
  lookup.insert_or_assign(ExternalSequenceBlockHash{3}, a, 1);  // usable again
  CHECK(lookup.find(ExternalSequenceBlockHash{3})->node == a);
}

TEST_CASE("worker_lookup_take_nodes_counts_references_past_the_scanned_few") {
  // More nodes than take_nodes scans for (its sorting path), entries of each spread over the table.
  std::vector<NodeRef> made;
  for (int i = 0; i < 100; ++i) made.push_back(make_node());
  auto refs = [](const NodeRef& n) { return RadixTreeTestPeer::refs(*n); };
  WorkerLookup lookup;
  for (std::uint64_t i = 0; i < 700; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, made[i % 100], i);
  std::vector<NodeRef> nodes = lookup.take_nodes();
  CHECK(lookup.size() == 0);
  REQUIRE(nodes.size() == 100);
  std::vector<RadixNode*> got;
  for (const auto& node : nodes) got.push_back(node.get());
  std::sort(got.begin(), got.end());
  CHECK(std::adjacent_find(got.begin(), got.end()) == got.end());  // each node once
  for (const auto& node : made) CHECK(refs(node) == 2);            // seven entries' references became one
  nodes.clear();
  for (const auto& node : made) CHECK(refs(node) == 1);
}
