// Where an index's bytes go, counted from its own structures (not RSS, which moves with the
// allocator's free lists and from run to run). Every figure is in bytes as glibc's malloc hands
// them out: each allocation rounded to its chunk (payload + 8, to 16, at least 32).
#pragma once

#include <cstddef>

namespace kvidx {

// The chunk glibc's malloc uses for a request of `bytes` (0: no allocation).
constexpr std::size_t malloc_chunk_bytes(std::size_t bytes) {
  if (bytes == 0) return 0;
  const std::size_t chunk = (bytes + 8 + 15) & ~std::size_t{15};
  return chunk < 32 ? 32 : chunk;
}

// Chunk bytes of a std::unordered_map/set with `size` elements of `value_bytes` each and
// `buckets` buckets: one node per element (next pointer, value, cached hash), the bucket array.
constexpr std::size_t hash_table_chunk_bytes(std::size_t size, std::size_t buckets, std::size_t value_bytes) {
  return size * malloc_chunk_bytes(8 + value_bytes + 8) + malloc_chunk_bytes(buckets * sizeof(void*));
}

struct TreeMemory {
  std::size_t nodes = 0;           // attached nodes, the root included
  std::size_t node_bytes = 0;      // the RadixNode objects (lock, counters, inline coverage)
  std::size_t edge_bytes = 0;      // edges: local hash + canonical name per block
  std::size_t coverage_bytes = 0;  // coverage spilled to the heap (more than the inline entries)
  std::size_t name_bytes = 0;      // holders' own names where they differ from the canonical ones
  std::size_t child_bytes = 0;     // child tables (vector, plus a hash index on wide nodes)

  std::size_t total() const { return node_bytes + edge_bytes + coverage_bytes + name_bytes + child_bytes; }
  TreeMemory& operator+=(const TreeMemory& other) {
    nodes += other.nodes;
    node_bytes += other.node_bytes;
    edge_bytes += other.edge_bytes;
    coverage_bytes += other.coverage_bytes;
    name_bytes += other.name_bytes;
    child_bytes += other.child_bytes;
    return *this;
  }
};

}  // namespace kvidx
