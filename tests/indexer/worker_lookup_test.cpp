// WorkerLookup keeps a 12-byte bucket per block: the key, and a word naming the node by its slot in
// the stream's node table and the block by its offset from the node's start depth. Depths round-trip
// at every offset boundary (past 13 bits, and above the node's start, through the side map); the
// lookup holds exactly one reference per node its entries lead to, through inserts, re-assignments,
// rehashes, erases, moves and clear; entries past the node table spill to a side map that holds one
// reference per entry; dropped marks share the buckets and hold none. A randomized run checks all
// of it against a plain map.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "libindexer/tree/worker_lookup.h"
#include "tests/support/radix_tree_test_peer.h"

using namespace kvidx;

namespace {

NodeRef make_node(std::uint32_t start_depth = 0) { return NodeRef(new RadixNode(start_depth, {})); }

std::uint32_t refs(const NodeRef& node) { return RadixTreeTestPeer::refs(*node); }

std::vector<StoredBlock> blocks(std::uint64_t first, std::uint64_t count) {
  std::vector<StoredBlock> out;
  for (std::uint64_t i = 0; i < count; ++i) {
    out.push_back(StoredBlock{ExternalSequenceBlockHash{first + i}, LocalBlockHash{i}});
  }
  return out;
}

// Offsets from a node's start depth on both sides of the 13-bit field's limits.
constexpr std::uint32_t kOffsets[] = {0, 1, 7, 0x1FFD, 0x1FFE, 0x1FFF, 0x2000, 0x2001, 0x7FFFF, 3'000'000};

}  // namespace

TEST_CASE("worker_lookup_round_trips_depths_at_every_offset_boundary") {
  const NodeRef at_root = make_node(0);
  const NodeRef deep = make_node(1000);
  WorkerLookup lookup;
  std::map<std::uint64_t, std::pair<RadixNode*, std::uint32_t>> want;
  std::uint64_t key = 100;
  for (const std::uint32_t offset : kOffsets) {
    for (const NodeRef* node : {&at_root, &deep}) {
      const std::uint32_t depth = (*node)->start_depth() + offset;
      lookup.insert_or_assign(ExternalSequenceBlockHash{key}, *node, depth);
      want[key++] = {node->get(), depth};
    }
  }
  // A depth above the node's start (its entry went stale, or the caller knew better): the side map.
  for (const std::uint32_t depth : {0u, 1u, 999u}) {
    lookup.insert_or_assign(ExternalSequenceBlockHash{key}, deep, depth);
    want[key++] = {deep.get(), depth};
  }
  lookup.insert_or_assign(ExternalSequenceBlockHash{key}, at_root, 0xFFFF'FFFFu);
  want[key++] = {at_root.get(), 0xFFFF'FFFFu};
  // Enough further entries to rehash several times.
  for (std::uint64_t i = 0; i < 1000; ++i) {
    lookup.insert_or_assign(ExternalSequenceBlockHash{5000 + i}, deep, 1000 + 0x1FF0 + i);
    want[5000 + i] = {deep.get(), 1000 + 0x1FF0 + static_cast<std::uint32_t>(i)};
  }
  for (const auto& [k, node_depth] : want) {
    const auto peeked = lookup.peek(ExternalSequenceBlockHash{k});
    REQUIRE(peeked.has_value());
    CHECK(peeked->node == node_depth.first);
    CHECK(peeked->depth == node_depth.second);
    const LookupEntry* entry = lookup.find(ExternalSequenceBlockHash{k});
    REQUIRE(entry != nullptr);
    CHECK(entry->node.get() == node_depth.first);
    CHECK(entry->depth == node_depth.second);
  }
  CHECK(lookup.find(ExternalSequenceBlockHash{99}) == nullptr);

  // A deep entry re-assigned shallow (and back, and to a depth above the node) keeps the right depth.
  lookup.insert_or_assign(ExternalSequenceBlockHash{5999}, deep, 1003);
  CHECK(lookup.find(ExternalSequenceBlockHash{5999})->depth == 1003);
  lookup.insert_or_assign(ExternalSequenceBlockHash{5999}, deep, 4'000'000);
  CHECK(lookup.find(ExternalSequenceBlockHash{5999})->depth == 4'000'000);
  lookup.insert_or_assign(ExternalSequenceBlockHash{5999}, deep, 2);
  CHECK(lookup.find(ExternalSequenceBlockHash{5999})->depth == 2);
  lookup.insert_or_assign(ExternalSequenceBlockHash{5999}, at_root, 0x1FFE);
  CHECK(lookup.find(ExternalSequenceBlockHash{5999})->depth == 0x1FFE);
  CHECK(lookup.find(ExternalSequenceBlockHash{5999})->node == at_root);
  want[5999] = {at_root.get(), 0x1FFE};

  std::size_t visited = 0;
  lookup.for_each([&](ExternalSequenceBlockHash hash, const LookupEntry& entry) {
    ++visited;
    CHECK(entry.node.get() == want.at(hash.value).first);
    CHECK(entry.depth == want.at(hash.value).second);
  });
  CHECK(visited == want.size());
  CHECK(lookup.size() == want.size());
  CHECK(lookup.node_count() == 2);
}

TEST_CASE("worker_lookup_holds_one_reference_per_node_its_entries_lead_to") {
  const NodeRef a = make_node();
  const NodeRef b = make_node();
  {
    WorkerLookup lookup;
    for (std::uint64_t i = 0; i < 300; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, a, i);
    CHECK(refs(a) == 1 + 1);
    (void)lookup.find(ExternalSequenceBlockHash{1});  // the handed-out copy holds one more
    CHECK(refs(a) == 1 + 1 + 1);
    for (std::uint64_t i = 0; i < 100; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, b, i + 1);
    CHECK(refs(a) == 1 + 1 + 1);
    CHECK(refs(b) == 1 + 1);
    CHECK(lookup.node_count() == 2);
    (void)lookup.find(ExternalSequenceBlockHash{5});  // the copy moves to b
    CHECK(refs(a) == 1 + 1);
    CHECK(refs(b) == 1 + 1 + 1);
    for (std::uint64_t i = 100; i < 150; ++i) CHECK(lookup.erase(ExternalSequenceBlockHash{i}));
    CHECK_FALSE(lookup.erase(ExternalSequenceBlockHash{100}));
    CHECK(refs(a) == 1 + 1);

    // Erasing every entry that leads to b lets go of b (the last find's copy aside).
    for (std::uint64_t i = 0; i < 100; ++i) CHECK(lookup.erase(ExternalSequenceBlockHash{i}));
    CHECK(refs(b) == 1 + 1);
    (void)lookup.find(ExternalSequenceBlockHash{200});
    CHECK(refs(b) == 1);
    CHECK(lookup.node_count() == 1);
    // The freed slot is reused for the next node.
    lookup.insert_or_assign(ExternalSequenceBlockHash{0}, b, 7);
    CHECK(refs(b) == 1 + 1);
    CHECK(lookup.node_count() == 2);

    WorkerLookup moved(std::move(lookup));
    CHECK(refs(a) == 1 + 1 + 1);
    WorkerLookup assigned;
    const NodeRef c = make_node();
    assigned.insert_or_assign(ExternalSequenceBlockHash{7}, c, 1);
    CHECK(refs(c) == 1 + 1);
    assigned = std::move(moved);  // drops what `assigned` held
    CHECK(refs(c) == 1);
    CHECK(assigned.find(ExternalSequenceBlockHash{200})->node == a);
    CHECK(assigned.find(ExternalSequenceBlockHash{0})->depth == 7);
    assigned.clear();
    CHECK(refs(a) == 1);
    CHECK(refs(b) == 1);
    CHECK(assigned.node_count() == 0);
    assigned.insert_or_assign(ExternalSequenceBlockHash{1}, a, 0x90000);
    CHECK(refs(a) == 2);
  }
  CHECK(refs(a) == 1);  // the destructor dropped the last node's reference
  CHECK(refs(b) == 1);
}

TEST_CASE("worker_lookup_runs_find_their_node_once_and_move_between_nodes") {
  const NodeRef a = make_node(0x1F00);
  const NodeRef b = make_node();
  {
    WorkerLookup lookup;
    // Past the offset field for part of the run (side map); enough to rehash.
    lookup.insert_run(blocks(0, 300), a, 0x1F00 + 0x1FFF - 100);
    CHECK(refs(a) == 1 + 1);
    CHECK(lookup.peek(ExternalSequenceBlockHash{150})->depth == 0x1F00 + 0x1FFF + 50);
    CHECK(lookup.peek(ExternalSequenceBlockHash{99})->depth == 0x1F00 + 0x1FFE);
    CHECK(lookup.peek(ExternalSequenceBlockHash{150})->node == a.get());
    // Re-stored on the same node (depths move, some above the node's start): the slot stays.
    lookup.insert_run(blocks(0, 100), a, 5);
    CHECK(refs(a) == 1 + 1);
    CHECK(lookup.peek(ExternalSequenceBlockHash{10})->depth == 15);
    lookup.insert_run(blocks(50, 100), b, 1);  // 50 of a's entries move to b, 50 new
    CHECK(refs(a) == 1 + 1);
    CHECK(refs(b) == 1 + 1);
    CHECK(lookup.size() == 300);
    // forget_all drops entries of both nodes and skips unknown hashes and repeats.
    std::vector<ExternalSequenceBlockHash> names;
    for (std::uint64_t i = 40; i < 160; ++i) names.push_back(ExternalSequenceBlockHash{i});
    names.push_back(ExternalSequenceBlockHash{45});
    names.push_back(ExternalSequenceBlockHash{9999});
    lookup.forget_all(names);
    CHECK(refs(a) == 1 + 1);  // 0-39 and 160-299 remain
    CHECK(refs(b) == 1);      // all of b's entries were named
    CHECK(lookup.size() == 300 - 120);
    CHECK_FALSE(lookup.peek(ExternalSequenceBlockHash{100}).has_value());
    CHECK(lookup.peek(ExternalSequenceBlockHash{39})->node == a.get());
    CHECK(lookup.peek(ExternalSequenceBlockHash{39})->depth == 44);
    CHECK(lookup.peek(ExternalSequenceBlockHash{299})->depth == 0x1F00 + 0x1FFF - 100 + 299);
  }
  CHECK(refs(a) == 1);
  CHECK(refs(b) == 1);
}

TEST_CASE("worker_lookup_re_stored_runs_leave_what_still_leads_there_and_place_the_rest") {
  const NodeRef a = make_node(10);
  const NodeRef b = make_node(10);
  WorkerLookup lookup;
  auto depth_of = [&](std::uint64_t key) { return lookup.peek(ExternalSequenceBlockHash{key})->depth; };
  auto node_of = [&](std::uint64_t key) { return lookup.peek(ExternalSequenceBlockHash{key})->node; };
  lookup.insert_run(blocks(0, 4), a, 12);
  lookup.insert_run(blocks(0, 8), a, 12);  // the first four lead there already, four are new
  CHECK(lookup.size() == 8);
  CHECK(lookup.node_count() == 1);
  CHECK(refs(a) == 1 + 1);
  for (std::uint64_t k = 0; k < 8; ++k) CHECK(depth_of(k) == 12 + k);
  lookup.insert_run(blocks(0, 8), a, 12);  // everything leads there: nothing changes
  CHECK(lookup.size() == 8);
  CHECK(refs(a) == 1 + 1);
  for (std::uint64_t k = 0; k < 8; ++k) CHECK(depth_of(k) == 12 + k);
  // A dropped block inside the run is held again; a shifted run moves every depth.
  lookup.scrub_dropped(ExternalSequenceBlockHash{5});
  CHECK(lookup.dropped_size() == 1);
  lookup.insert_run(blocks(0, 8), a, 12);
  CHECK(lookup.dropped_size() == 0);
  CHECK(lookup.size() == 8);
  CHECK(depth_of(5) == 17);
  lookup.insert_run(blocks(2, 6), a, 20);
  CHECK(depth_of(1) == 13);
  for (std::uint64_t k = 2; k < 8; ++k) CHECK(depth_of(k) == 18 + k);
  // A depth above the node's start (block 0 here) is in the side map: never taken as unchanged.
  lookup.insert_run(blocks(0, 3), a, 9);
  CHECK(depth_of(0) == 9);
  CHECK(depth_of(2) == 11);
  lookup.insert_run(blocks(0, 3), a, 9);
  CHECK(depth_of(1) == 10);
  // The first block leads to another node: the run's node is found in the table.
  lookup.insert_run(blocks(0, 8), b, 10);
  CHECK(lookup.node_count() == 1);
  CHECK(refs(a) == 1);
  CHECK(refs(b) == 1 + 1);
  for (std::uint64_t k = 0; k < 8; ++k) {
    CHECK(node_of(k) == b.get());
    CHECK(depth_of(k) == 10 + k);
  }
}

TEST_CASE("worker_lookup_dropped_marks_live_in_buckets_and_hold_no_reference") {
  const NodeRef a = make_node();
  const NodeRef b = make_node();
  {
    WorkerLookup lookup;
    for (std::uint64_t i = 0; i < 100; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, a, 0x1FFF + i);
    // A scrubbed entry becomes a mark: not found, dropped, its use (and deep depth) gone.
    for (std::uint64_t i = 0; i < 40; ++i) lookup.scrub_dropped(ExternalSequenceBlockHash{i});
    lookup.scrub_dropped(ExternalSequenceBlockHash{5});     // a mark stays a mark
    lookup.scrub_dropped(ExternalSequenceBlockHash{9999});  // unknown: no mark
    CHECK(refs(a) == 1 + 1);
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
    for (std::uint64_t i = 40; i < 100; ++i) CHECK(lookup.peek(ExternalSequenceBlockHash{i})->depth == 0x1FFF + i);

    // Stored again: the mark is lifted and the entry leads to its node again.
    lookup.insert_or_assign(ExternalSequenceBlockHash{3}, b, 2);
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{3}));
    CHECK(lookup.peek(ExternalSequenceBlockHash{3})->node == b.get());
    lookup.insert_run(blocks(10, 10), a, 7);
    CHECK(lookup.peek(ExternalSequenceBlockHash{12})->depth == 9);
    CHECK(lookup.dropped_size() == 40 - 11);
    CHECK(lookup.size() == 60 + 2000 + 11);

    // Naming a block (Removed) erases its mark or entry; erase says which it was.
    const ExternalSequenceBlockHash named[] = {{20}, {21}, {50}, {9999}};
    lookup.forget_all(named);
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{20}));
    CHECK_FALSE(lookup.peek(ExternalSequenceBlockHash{50}).has_value());
    CHECK(lookup.dropped_size() == 40 - 11 - 2);
    CHECK_FALSE(lookup.erase(ExternalSequenceBlockHash{22}));  // a mark
    CHECK_FALSE(lookup.was_dropped(ExternalSequenceBlockHash{22}));
    CHECK(lookup.erase(ExternalSequenceBlockHash{51}));  // an entry
    // Every other mark and entry is still found after the backward shifts of those erases.
    for (std::uint64_t i = 23; i < 40; ++i) CHECK(lookup.was_dropped(ExternalSequenceBlockHash{i}));
    for (std::uint64_t i = 52; i < 100; ++i) CHECK(lookup.peek(ExternalSequenceBlockHash{i})->node == a.get());

    // Scrubbing every entry that leads to a node lets go of the node; its marks stay.
    for (std::uint64_t i = 0; i < 100; ++i) lookup.scrub_dropped(ExternalSequenceBlockHash{i});
    (void)lookup.find(ExternalSequenceBlockHash{1000});  // for_each's last handed-out copy may be of a
    CHECK(refs(a) == 1);
    CHECK(lookup.node_count() == 1);
    CHECK(lookup.was_dropped(ExternalSequenceBlockHash{99}));

    // clear() drops entries and marks but keeps the buckets and the node table for the stream's
    // next stores.
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
  const NodeRef c = make_node(3);
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
    CHECK(lookup.node_count() == 0);
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

TEST_CASE("worker_lookup_entries_past_the_node_table_spill_and_come_back") {
  std::vector<NodeRef> made;
  for (std::uint32_t i = 0; i < 6; ++i) made.push_back(make_node(i * 10));
  WorkerLookup lookup;
  RadixTreeTestPeer::limit_node_slots(lookup, 2);
  // Nodes 0 and 1 take the two slots; entries of nodes 2..5 spill, one reference each.
  for (std::uint64_t i = 0; i < 60; ++i) {
    lookup.insert_or_assign(ExternalSequenceBlockHash{i}, made[i % 6], static_cast<std::uint32_t>(i % 6) * 10 + 1);
  }
  CHECK(lookup.node_count() == 2);
  CHECK(refs(made[0]) == 1 + 1);
  CHECK(refs(made[1]) == 1 + 1);
  for (std::size_t n = 2; n < 6; ++n) CHECK(refs(made[n]) == 1 + 10);
  for (std::uint64_t i = 0; i < 60; ++i) {
    const auto peeked = lookup.peek(ExternalSequenceBlockHash{i});
    REQUIRE(peeked.has_value());
    CHECK(peeked->node == made[i % 6].get());
    CHECK(peeked->depth == (i % 6) * 10 + 1);
  }
  // A spilled entry re-assigned to a slotted node leaves the side map, and back.
  lookup.insert_or_assign(ExternalSequenceBlockHash{2}, made[0], 5);
  CHECK(refs(made[2]) == 1 + 9);
  CHECK(lookup.peek(ExternalSequenceBlockHash{2})->depth == 5);
  lookup.insert_or_assign(ExternalSequenceBlockHash{2}, made[3], 0x90000);
  CHECK(refs(made[3]) == 1 + 11);
  CHECK(lookup.peek(ExternalSequenceBlockHash{2})->depth == 0x90000);
  // Erase and scrub let go of spilled entries' references.
  CHECK(lookup.erase(ExternalSequenceBlockHash{4}));
  lookup.scrub_dropped(ExternalSequenceBlockHash{10});
  CHECK(refs(made[4]) == 1 + 8);
  CHECK(lookup.was_dropped(ExternalSequenceBlockHash{10}));

  // When node 1's entries all go, its slot is free: node 5's next entries take it, while the
  // ones already spilled stay spilled until re-assigned.
  for (std::uint64_t i = 1; i < 60; i += 6) CHECK(lookup.erase(ExternalSequenceBlockHash{i}));
  CHECK(refs(made[1]) == 1);
  CHECK(lookup.node_count() == 1);
  lookup.insert_or_assign(ExternalSequenceBlockHash{1000}, made[5], 51);
  CHECK(lookup.node_count() == 2);
  CHECK(refs(made[5]) == 1 + 10 + 1);
  lookup.insert_or_assign(ExternalSequenceBlockHash{5}, made[5], 52);  // was spilled on the same node
  CHECK(refs(made[5]) == 1 + 9 + 1);
  CHECK(lookup.peek(ExternalSequenceBlockHash{5})->depth == 52);

  // take_nodes hands each node over once, whether it had a slot, spilled entries, or both.
  std::vector<NodeRef> nodes = lookup.take_nodes();
  std::vector<RadixNode*> got;
  for (const auto& node : nodes) got.push_back(node.get());
  std::sort(got.begin(), got.end());
  std::vector<RadixNode*> want{made[0].get(), made[2].get(), made[3].get(), made[4].get(), made[5].get()};
  std::sort(want.begin(), want.end());
  CHECK(got == want);
  for (std::size_t n : {0, 2, 3, 4, 5}) CHECK(refs(made[n]) == 2);
  nodes.clear();
  for (const auto& node : made) CHECK(refs(node) == 1);
}

TEST_CASE("worker_lookup_take_nodes_hands_over_many_nodes_once_each") {
  std::vector<NodeRef> made;
  for (int i = 0; i < 100; ++i) made.push_back(make_node());
  WorkerLookup lookup;
  for (std::uint64_t i = 0; i < 700; ++i) lookup.insert_or_assign(ExternalSequenceBlockHash{i}, made[i % 100], i);
  CHECK(lookup.node_count() == 100);
  std::vector<NodeRef> nodes = lookup.take_nodes();
  CHECK(lookup.size() == 0);
  REQUIRE(nodes.size() == 100);
  std::vector<RadixNode*> got;
  for (const auto& node : nodes) got.push_back(node.get());
  std::sort(got.begin(), got.end());
  CHECK(std::adjacent_find(got.begin(), got.end()) == got.end());  // each node once
  for (const auto& node : made) CHECK(refs(node) == 2);
  nodes.clear();
  for (const auto& node : made) CHECK(refs(node) == 1);
}

// Random inserts, runs, erases, scrubs, clears and take_nodes against a plain map, with a node
// table full enough to spill in one half of the runs.
TEST_CASE("worker_lookup_agrees_with_a_plain_map_under_random_operations") {
  for (const std::uint32_t node_slots : {0u, 5u}) {  // 0: the default table
    CAPTURE(node_slots);
    std::mt19937_64 rng(0x5EED + node_slots);
    std::vector<NodeRef> nodes;
    for (const std::uint32_t start : {0u, 1u, 64u, 0x1FFFu, 0x2000u, 100'000u, 0x7FFF'0000u}) {
      for (int copy = 0; copy < 3; ++copy) nodes.push_back(make_node(start));
    }
    struct Held {
      std::size_t node;
      std::uint32_t depth;
    };
    std::map<std::uint64_t, Held> model;
    std::set<std::uint64_t> marks;
    struct Run {
      std::uint64_t first;
      std::uint64_t count;
      std::uint32_t depth;
      std::size_t node;
    };
    std::vector<Run> runs;  // the latest runs stored, to store again
    WorkerLookup lookup;
    if (node_slots != 0) RadixTreeTestPeer::limit_node_slots(lookup, node_slots);
    auto pick_depth = [&](std::size_t node) -> std::uint32_t {
      const std::uint32_t start = nodes[node]->start_depth();
      switch (rng() % 4) {
        case 0: return start + kOffsets[rng() % std::size(kOffsets)];
        case 1: return start == 0 ? 0 : static_cast<std::uint32_t>(rng() % start);  // above the node
        default: return start + static_cast<std::uint32_t>(rng() % 40);
      }
    };
    auto check_all = [&] {
      REQUIRE(lookup.size() == model.size());
      REQUIRE(lookup.dropped_size() == marks.size());
      std::vector<std::size_t> entries_per_node(nodes.size(), 0);
      for (std::uint64_t key = 0; key < 600; ++key) {
        const auto peeked = lookup.peek(ExternalSequenceBlockHash{key});
        const auto held = model.find(key);
        REQUIRE(peeked.has_value() == (held != model.end()));
        REQUIRE(lookup.was_dropped(ExternalSequenceBlockHash{key}) == (marks.count(key) == 1));
        if (held == model.end()) continue;
        REQUIRE(peeked->node == nodes[held->second.node].get());
        REQUIRE(peeked->depth == held->second.depth);
        ++entries_per_node[held->second.node];
      }
      std::size_t led_to = 0;
      for (std::size_t n = 0; n < nodes.size(); ++n) {
        // The test's own reference, plus the lookup's: one for the node table's slot, or one per
        // spilled entry; none when no entry leads to the node.
        const std::uint32_t held_refs = refs(nodes[n]) - 1;
        if (entries_per_node[n] == 0) {
          REQUIRE(held_refs == 0);
        } else {
          ++led_to;
          if (node_slots == 0) REQUIRE(held_refs == 1);
          REQUIRE(held_refs >= 1);
          REQUIRE(held_refs <= entries_per_node[n]);
        }
      }
      if (node_slots == 0) REQUIRE(lookup.node_count() == led_to);
      REQUIRE(lookup.node_count() <= (node_slots == 0 ? nodes.size() : node_slots));
    };
    for (int step = 0; step < 20'000; ++step) {
      const std::uint64_t key = rng() % 600;
      const std::size_t node = rng() % nodes.size();
      const unsigned op = static_cast<unsigned>(rng() % 1000);
      if (op < 400) {
        const std::uint32_t depth = pick_depth(node);
        lookup.insert_or_assign(ExternalSequenceBlockHash{key}, nodes[node], depth);
        model[key] = Held{node, depth};
        marks.erase(key);
      } else if (op < 550) {
        std::uint64_t count = 1 + rng() % 30;
        std::uint64_t first = rng() % (600 - count);
        std::uint32_t depth = pick_depth(node);
        std::size_t run_node = node;
        // A third of the runs store an earlier run again (the re-store fast path: the entries
        // that still lead there are left as they are, the others are placed again).
        if (!runs.empty() && rng() % 3 == 0) {
          const Run& again = runs[rng() % runs.size()];
          count = again.count;
          first = again.first;
          depth = again.depth;
          run_node = again.node;
        } else {
          runs.push_back(Run{first, count, depth, node});
          if (runs.size() > 16) runs.erase(runs.begin());
        }
        lookup.insert_run(blocks(first, count), nodes[run_node], depth);
        for (std::uint64_t i = 0; i < count; ++i) {
          model[first + i] = Held{run_node, depth + static_cast<std::uint32_t>(i)};
          marks.erase(first + i);
        }
      } else if (op < 800) {
        CHECK(lookup.erase(ExternalSequenceBlockHash{key}) == (model.count(key) == 1));
        model.erase(key);
        marks.erase(key);
      } else if (op < 990) {
        lookup.scrub_dropped(ExternalSequenceBlockHash{key});
        if (model.erase(key) == 1) marks.insert(key);
      } else if (op < 995) {
        lookup.clear();
        model.clear();
        marks.clear();
      } else {
        std::set<RadixNode*> want;
        for (const auto& [k, held] : model) want.insert(nodes[held.node].get());
        std::vector<NodeRef> taken = lookup.take_nodes();
        std::vector<RadixNode*> got;
        for (const auto& ref : taken) got.push_back(ref.get());
        std::sort(got.begin(), got.end());
        REQUIRE(got == std::vector<RadixNode*>(want.begin(), want.end()));
        model.clear();
        marks.clear();
      }
      if (step % 97 == 0) check_all();
    }
    check_all();
  }
}
