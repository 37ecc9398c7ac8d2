// ConcurrentRadixTree, memory accounting: walks the attached nodes under shared locks (top-down,
// one node at a time) and adds up what each owns. Safe while writers run; the figures are then
// those of some moment of each node, not of one instant of the whole tree.
#include "libindexer/tree/radix_tree.h"

#include <vector>

namespace kvidx {

TreeMemory ConcurrentRadixTree::memory() const {
  TreeMemory out;
  std::vector<NodeRef> stack{root_};
  while (!stack.empty()) {
    NodeRef node = std::move(stack.back());
    stack.pop_back();
    SharedLock lock(node->mutex_);
    const RadixNode& n = *node;
    ++out.nodes;
    out.node_bytes += malloc_chunk_bytes(sizeof(RadixNode));
    out.edge_bytes += malloc_chunk_bytes(n.edge_.capacity() * sizeof(EdgeBlock));
    out.coverage_bytes += malloc_chunk_bytes(n.coverage_.heap_bytes());
    out.name_bytes += n.names_.chunk_bytes();
    out.child_bytes += n.children_.chunk_bytes();
    for (const auto& [key, child] : n.children_.entries()) stack.push_back(child);
  }
  return out;
}

}  // namespace kvidx
