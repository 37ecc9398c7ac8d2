// ConcurrentRadixTree, memory accounting: walks the attached nodes (for_each_node) and adds up
// what each owns. Safe while writers run; the figures are then
// those of some moment of each node, not of one instant of the whole tree.
#include "libindexer/tree/radix_tree.h"

namespace kvidx {

TreeMemory ConcurrentRadixTree::memory() const {
  TreeMemory out;
  for_each_node([&](const RadixNode& n) {
    ++out.nodes;
    out.node_bytes += malloc_chunk_bytes(sizeof(RadixNode));
    out.edge_bytes += malloc_chunk_bytes(n.edge_.capacity() * sizeof(EdgeBlock));
    out.coverage_bytes += malloc_chunk_bytes(n.coverage_.heap_bytes());
    out.name_bytes += n.names_.chunk_bytes();
    out.child_bytes += n.children_.chunk_bytes();
  });
  return out;
}

}  // namespace kvidx
