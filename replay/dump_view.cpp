#include "replay/dump_view.h"

#include <fmt/format.h>

#include <set>
#include <unordered_set>

namespace kvidx {

struct DumpView::Node {
  LocalBlockHash local;
  std::set<WorkerWithDpRank> streams;
  std::map<std::uint64_t, std::unique_ptr<Node>> children;  // by local hash, sorted for stable output
};

DumpView::DumpView() {
  for (auto& tier : tiers_) tier.root = std::make_unique<Node>();
}
DumpView::~DumpView() = default;

bool DumpView::add(const RouterEvent& event) {
  const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data);
  if (stored == nullptr) return false;
  const WorkerWithDpRank stream = event.stream();
  Tier& tier = tiers_[tier_index(event.tier())];
  auto& known = tier.by_external[stream];
  Node* at = tier.root.get();
  if (stored->parent_hash) {
    auto parent = known.find(stored->parent_hash->value);
    if (parent == known.end()) return false;
    at = parent->second;
  }
  for (const auto& block : stored->blocks) {
    auto& child = at->children[block.tokens_hash.value];
    if (!child) {
      child = std::make_unique<Node>();
      child->local = block.tokens_hash;
    }
    child->streams.insert(stream);
    known[block.block_hash.value] = child.get();
    at = child.get();
  }
  return true;
}

namespace {

// Walks the compressed view: calls `on_edge(depth, blocks)` for each maximal run of nodes where
// each node has one child covered by the same streams.
template <class Node, class F>
void for_each_edge(const Node& root, F&& on_edge) {
  std::vector<std::pair<const Node*, std::size_t>> stack;  // (edge head, depth)
  for (auto it = root.children.rbegin(); it != root.children.rend(); ++it) stack.emplace_back(it->second.get(), 0);
  while (!stack.empty()) {
    auto [head, depth] = stack.back();
    stack.pop_back();
    std::vector<const Node*> run{head};
    while (run.back()->children.size() == 1 && run.back()->children.begin()->second->streams == head->streams) {
      run.push_back(run.back()->children.begin()->second.get());
    }
    on_edge(depth, run);
    const Node* tail = run.back();
    for (auto it = tail->children.rbegin(); it != tail->children.rend(); ++it)
      stack.emplace_back(it->second.get(), depth + 1);
  }
}

}  // namespace

DumpSummary DumpView::summary(StorageTier tier) const {
  const Tier& view = tiers_[tier_index(tier)];
  DumpSummary out;
  std::set<WorkerId> workers;
  for (const auto& [stream, hashes] : view.by_external) {
    if (hashes.empty()) continue;
    workers.insert(stream.worker_id);
    ++out.streams;
  }
  out.workers = workers.size();
  for_each_edge(*view.root, [&](std::size_t, const std::vector<const Node*>& run) {
    ++out.edges;
    ++out.edge_length_histogram[run.size()];
    out.distinct_blocks += run.size();
    for (const Node* node : run) out.blocks += node->streams.size();
  });
  return out;
}

std::string DumpView::render_tree(std::size_t max_hashes_per_edge) const {
  std::string out;
  for (const StorageTier tier : kStorageTiers) {
    const Node& root = *tiers_[tier_index(tier)].root;
    if (tier != StorageTier::device) {
      if (root.children.empty()) continue;
      out += fmt::format("tier {}:\n", to_string(tier));
    }
    render_edges(root, max_hashes_per_edge, out);
  }
  return out;
}

void DumpView::render_edges(const Node& root, std::size_t max_hashes_per_edge, std::string& out) {
  for_each_edge(root, [&](std::size_t depth, const std::vector<const Node*>& run) {
    out.append(depth * 2, ' ');
    out += '[';
    for (std::size_t i = 0; i < run.size() && i < max_hashes_per_edge; ++i) {
      if (i > 0) out += ' ';
      out += fmt::format("{}", run[i]->local.value);
    }
    if (run.size() > max_hashes_per_edge) out += " …";
    out += fmt::format("] ({} block{})", run.size(), run.size() == 1 ? "" : "s");
    for (const auto& stream : run.front()->streams) out += fmt::format(" {}/{}", stream.worker_id, stream.dp_rank);
    out += '\n';
  });
}

}  // namespace kvidx
