#include "replay/mooncake_workload.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "libindexer/hashing.h"
#include "replay/event_log_reader.h"

namespace kvidx {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// One (worker, rank) cache. Holds blocks by external hash with their parent; evicts the least
// recently used *leaf* so that what it reports removed is always a suffix of a held chain.
class SimulatedCache {
 public:
  SimulatedCache(WorkerWithDpRank stream, std::size_t capacity) : stream_(stream), capacity_(capacity) {}

  void serve(const std::vector<LocalBlockHash>& locals, std::size_t chunk, WorkloadStats& stats,
             const std::function<void(RouterEvent&&)>& emit) {
    const auto ext = compute_sequence_hashes(locals);
    std::size_t cached = 0;
    while (cached < ext.size() && blocks_.count(ext[cached].value) != 0) ++cached;
    for (std::size_t i = 0; i < cached; ++i) touch(ext[i].value);
    for (std::size_t start = cached; start < ext.size(); start += chunk) {
      const std::size_t end = std::min(ext.size(), start + chunk);
      KvCacheStoreData data;
      if (start > 0) data.parent_hash = ext[start - 1];
      for (std::size_t i = start; i < end; ++i) {
        data.blocks.push_back(StoredBlock{ext[i], locals[i]});
        insert(ext[i].value, i > 0 ? ext[i - 1].value : 0, i > 0);
      }
      stats.stored_blocks += data.blocks.size();
      ++stats.stored_events;
      emit(make_event(std::move(data)));
    }
    evict_to_capacity(stats, emit);
  }

 private:
  struct Block {
    std::uint64_t parent = 0;
    bool has_parent = false;
    std::uint32_t children = 0;
    std::uint64_t tick = 0;
  };

  RouterEvent make_event(KvCacheEventData data) {
    return RouterEvent{stream_.worker_id, KvCacheEvent{next_event_id_++, std::move(data), stream_.dp_rank},
                       std::nullopt};
  }

  void touch(std::uint64_t hash) {
    auto& block = blocks_.at(hash);
    if (block.children == 0) leaves_.erase({block.tick, hash});
    block.tick = ++clock_;
    if (block.children == 0) leaves_.insert({block.tick, hash});
  }

  void insert(std::uint64_t hash, std::uint64_t parent, bool has_parent) {
    if (has_parent) {
      auto& p = blocks_.at(parent);
      if (p.children++ == 0) leaves_.erase({p.tick, parent});
    }
    Block block{parent, has_parent, 0, ++clock_};
    blocks_.emplace(hash, block);
    leaves_.insert({block.tick, hash});
  }

  void evict_to_capacity(WorkloadStats& stats, const std::function<void(RouterEvent&&)>& emit) {
    if (blocks_.size() <= capacity_) return;
    KvCacheRemoveData removed;
    while (blocks_.size() > capacity_ && !leaves_.empty()) {
      const auto [tick, hash] = *leaves_.begin();
      leaves_.erase(leaves_.begin());
      const Block block = blocks_.at(hash);
      blocks_.erase(hash);
      removed.block_hashes.push_back(ExternalSequenceBlockHash{hash});
      if (block.has_parent) {
        auto& p = blocks_.at(block.parent);
        if (--p.children == 0) leaves_.insert({p.tick, block.parent});
      }
    }
    stats.removed_blocks += removed.block_hashes.size();
    ++stats.removed_events;
    emit(make_event(std::move(removed)));
  }

  WorkerWithDpRank stream_;
  std::size_t capacity_;
  std::uint64_t next_event_id_ = 0;
  std::uint64_t clock_ = 0;
  std::unordered_map<std::uint64_t, Block> blocks_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> leaves_;  // (last use, hash) of childless blocks
};

}  // namespace

bool load_mooncake_trace(const std::string& path, std::vector<MooncakeRequest>& out, std::string& error) {
  std::string line_error;
  error = for_each_line(path, [&](std::uint64_t line_number, std::string_view line) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true;
    try {
      const auto doc = nlohmann::json::parse(line);
      MooncakeRequest request;
      request.timestamp_ms = doc.at("timestamp").get<std::uint64_t>();
      request.input_length = doc.value("input_length", 0u);
      request.output_length = doc.value("output_length", 0u);
      request.hash_ids = doc.at("hash_ids").get<std::vector<std::uint64_t>>();
      out.push_back(std::move(request));
      return true;
    } catch (const std::exception& e) {
      line_error = fmt::format("{}:{}: {}", path, line_number, e.what());
      return false;
    }
  });
  if (error.empty()) error = line_error;
  return error.empty();
}

WorkloadStats simulate_workload(const std::vector<MooncakeRequest>& trace, const WorkloadOptions& options,
                                const WorkloadSink& sink) {
  WorkloadStats stats;
  const std::size_t workers = std::max<std::size_t>(1, options.workers);
  const DpRank ranks = std::max<DpRank>(1, options.dp_ranks);
  std::map<WorkerWithDpRank, SimulatedCache> caches;
  std::vector<const MooncakeRequest*> ordered;
  ordered.reserve(trace.size());
  for (const auto& r : trace) ordered.push_back(&r);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto* a, const auto* b) { return a->timestamp_ms < b->timestamp_ms; });

  for (const auto* request : ordered) {
    if (request->hash_ids.empty()) continue;
    for (std::size_t copy = 0; copy < options.copies; ++copy) {
      // Route by the second block (the first is often a shared system prompt) for prefix affinity.
      const std::uint64_t key = request->hash_ids[std::min<std::size_t>(1, request->hash_ids.size() - 1)];
      const std::uint64_t route = splitmix64(key ^ options.seed);
      const WorkerId worker = copy * workers + route % workers;
      const DpRank rank = static_cast<DpRank>((route / workers) % ranks);
      RoutedRequest routed{request->timestamp_ms, {worker, rank}, {}};
      const std::size_t length = std::min(request->hash_ids.size(), options.capacity_blocks);
      routed.local_hashes.reserve(length);
      // NOTE: copies live in disjoint hash spaces: the copy index goes into the high bits.
      for (std::size_t i = 0; i < length; ++i) {
        routed.local_hashes.push_back(LocalBlockHash{request->hash_ids[i] + (std::uint64_t{copy} << 40)});
      }
      ++stats.requests;
      if (sink.on_request) sink.on_request(routed);
      auto it = caches.try_emplace(routed.target, routed.target, options.capacity_blocks).first;
      it->second.serve(routed.local_hashes, std::max<std::size_t>(1, options.store_chunk_blocks), stats, sink.on_event);
    }
  }
  return stats;
}

}  // namespace kvidx
