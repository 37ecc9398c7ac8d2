// LaneIndexer::memory: the bytes of the trees and of the lanes' lookups, counted from the
// structures themselves. Every stored block has one lookup entry and one edge slot; holders' own
// names cost bytes only when they differ from the edge's.
#include <doctest/doctest.h>

#include <vector>

#include "libindexer/hashing.h"
#include "libindexer/lanes/lane_indexer.h"

using namespace kvidx;

namespace {

// A 100-block chain from the root in one Stored event; `rename` gives the stream its own names.
RouterEvent chain_event(WorkerId worker, std::uint64_t chain, std::uint64_t rename) {
  std::vector<LocalBlockHash> locals;
  for (std::uint64_t i = 0; i < 100; ++i) locals.push_back(LocalBlockHash{chain * 1000 + i + 1});
  const auto names = compute_sequence_hashes(locals);
  KvCacheStoreData data;
  for (std::size_t i = 0; i < locals.size(); ++i) {
    data.blocks.push_back(StoredBlock{ExternalSequenceBlockHash{names[i].value ^ rename}, locals[i]});
  }
  return RouterEvent{worker, KvCacheEvent{0, data, 0}, std::nullopt};
}

}  // namespace

TEST_CASE("memory counts one lookup entry and one edge block per stored block, and names only where they differ") {
  LaneIndexer indexer(2);
  for (WorkerId w = 1; w <= 8; ++w) REQUIRE(indexer.enqueue_event(chain_event(w, w, 0)) == IndexerStatus::ok);
  const IndexMemory shared = indexer.memory();
  CHECK(shared.lookup_entries == 800);
  CHECK(shared.lookup_bytes >= 800 * 16);
  CHECK(shared.trees.nodes == 9);  // one edge per chain, and the root
  CHECK(shared.trees.node_bytes == 9 * malloc_chunk_bytes(sizeof(RadixNode)));
  CHECK(shared.trees.edge_bytes >= 800 * 16);
  CHECK(shared.trees.edge_bytes < 800 * 16 * 2);
  CHECK(shared.trees.name_bytes == 0);
  CHECK(shared.total() == shared.trees.total() + shared.lookup_bytes);

  // Two more holders of chain 1: one under the same names, one under its own.
  REQUIRE(indexer.enqueue_event(chain_event(20, 1, 0)) == IndexerStatus::ok);
  REQUIRE(indexer.enqueue_event(chain_event(21, 1, 0x5555)) == IndexerStatus::ok);
  const IndexMemory more = indexer.memory();
  CHECK(more.lookup_entries == 1000);
  CHECK(more.trees.nodes == 9);
  CHECK(more.trees.edge_bytes == shared.trees.edge_bytes);
  CHECK(more.trees.name_bytes >= 100 * 8);  // worker 21's 100 names; worker 20 costs none
  CHECK(more.trees.name_bytes < 100 * 8 * 2);
  CHECK(more.lookup_bytes > shared.lookup_bytes);
}

TEST_CASE("malloc_chunk_bytes rounds a request as glibc does") {
  CHECK(malloc_chunk_bytes(0) == 0);
  CHECK(malloc_chunk_bytes(1) == 32);
  CHECK(malloc_chunk_bytes(24) == 32);
  CHECK(malloc_chunk_bytes(25) == 48);
  CHECK(malloc_chunk_bytes(1600) == 1616);
}
