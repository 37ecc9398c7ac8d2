// A read-only view of an index rebuilt from its dump (Stored events): which (worker, rank)s cover
// which prefix, printable as a compressed tree for humans and summarised as statistics. Works the
// same for a live dump (kv.admin.dump) and an offline one (replay then dump). Each storage tier is
// its own view, as in the index: an event's storage_tier picks it (absent: device).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx {

struct DumpSummary {
  std::size_t workers = 0;
  std::size_t streams = 0;  // (worker, rank)s holding blocks
  std::size_t blocks = 0;   // (stream, block) holdings
  std::size_t distinct_blocks = 0;
  std::size_t edges = 0;                                     // edges of the compressed view
  std::map<std::size_t, std::size_t> edge_length_histogram;  // length → edges
};

class DumpView {
 public:
  DumpView();
  ~DumpView();
  DumpView(const DumpView&) = delete;
  DumpView& operator=(const DumpView&) = delete;

  // Adds one Stored event; returns false if its parent is not a block already added for that
  // stream in that tier.
  bool add(const RouterEvent& event);

  // The device tier's view (what `scores` answer for).
  DumpSummary summary() const { return summary(StorageTier::device); }
  DumpSummary summary(StorageTier tier) const;
  // One line per edge of the compressed view, indented by depth:
  //   [1 2 3] (3 blocks) 1/0 2/0
  // where an edge is a run of blocks with a single child each and the same covering streams.
  // The device tier first, without a heading; then each other tier holding blocks, under a line
  // `tier host_pinned:` (a device-only dump prints exactly as it always did).
  std::string render_tree(std::size_t max_hashes_per_edge = 8) const;

 private:
  struct Node;
  static void render_edges(const Node& root, std::size_t max_hashes_per_edge, std::string& out);
  struct Tier {
    std::unique_ptr<Node> root;
    std::map<WorkerWithDpRank, std::map<std::uint64_t, Node*>> by_external;  // stream → ext hash → node
  };
  std::array<Tier, kStorageTierCount> tiers_;
};

}  // namespace kvidx
