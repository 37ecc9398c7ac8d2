#include "tests/support/event_builders.h"

#include <algorithm>

#include "libindexer/hashing.h"

namespace kvidx::testing {

std::vector<LocalBlockHash> local_hashes(const Hashes& values) {
  std::vector<LocalBlockHash> out;
  out.reserve(values.size());
  for (auto v : values) out.push_back(LocalBlockHash{v});
  return out;
}

std::vector<ExternalSequenceBlockHash> external_hashes(const Hashes& prefix, const Hashes& locals) {
  Hashes chain = prefix;
  chain.insert(chain.end(), locals.begin(), locals.end());
  const auto locs = local_hashes(chain);
  auto seq = compute_sequence_hashes(locs);
  return {seq.begin() + static_cast<std::ptrdiff_t>(prefix.size()), seq.end()};
}

namespace {

RouterEvent store_event(WorkerId worker, const Hashes& prefix, const Hashes& locals, DpRank rank) {
  KvCacheStoreData data;
  if (!prefix.empty()) data.parent_hash = external_hashes({}, prefix).back();
  const auto ext = external_hashes(prefix, locals);
  for (std::size_t i = 0; i < locals.size(); ++i) {
    data.blocks.push_back(StoredBlock{ext[i], LocalBlockHash{locals[i]}});
  }
  return RouterEvent{worker, KvCacheEvent{0, std::move(data), rank}, std::nullopt};
}

}  // namespace

RouterEvent make_store_event(WorkerId worker, const Hashes& locals) { return store_event(worker, {}, locals, 0); }

RouterEvent make_store_event_with_dp_rank(WorkerId worker, const Hashes& locals, DpRank rank) {
  return store_event(worker, {}, locals, rank);
}

RouterEvent make_store_event_with_parent(WorkerId worker, const Hashes& prefix, const Hashes& locals) {
  return store_event(worker, prefix, locals, 0);
}

std::vector<ExternalSequenceBlockHash> remove_hashes_with_parent(const Hashes& prefix, const Hashes& locals) {
  return external_hashes(prefix, locals);
}

RouterEvent make_remove_event_with_parent(WorkerId worker, const Hashes& prefix, const Hashes& locals) {
  return remove_event(worker, 0, 0, remove_hashes_with_parent(prefix, locals));
}

RouterEvent remove_event(WorkerId worker, std::uint64_t event_id, DpRank rank,
                         std::vector<ExternalSequenceBlockHash> hashes) {
  return RouterEvent{worker, KvCacheEvent{event_id, KvCacheRemoveData{std::move(hashes)}, rank}, std::nullopt};
}

RouterEvent make_clear_event_with_dp_rank(WorkerId worker, DpRank rank) {
  return RouterEvent{worker, KvCacheEvent{0, KvCacheClearData{}, rank}, std::nullopt};
}

std::vector<RouterEvent> make_long_chain(WorkerId worker, DpRank rank, std::size_t blocks, std::size_t per_event) {
  std::vector<RouterEvent> out;
  std::optional<ExternalSequenceBlockHash> parent;
  for (std::size_t first = 0; first < blocks; first += per_event) {
    KvCacheStoreData data;
    data.parent_hash = parent;
    for (std::size_t i = first; i < std::min(blocks, first + per_event); ++i) {
      // Distinct per (worker, rank, depth), large, deterministic (an odd multiplier over 2^64 is a
      // bijection); locals differ too, so two streams' chains never share a prefix.
      const std::uint64_t salt = worker * 0x100000001B3ull + rank;
      const std::uint64_t external = 0x9E3779B97F4A7C15ull * (i + 1) + salt;
      const std::uint64_t local = 0xC2B2AE3D27D4EB4Full * (i + 1) ^ (salt * 0x165667B19E3779F9ull);
      data.blocks.push_back(StoredBlock{ExternalSequenceBlockHash{external}, LocalBlockHash{local}});
    }
    parent = data.blocks.back().block_hash;
    out.push_back(RouterEvent{worker, KvCacheEvent{out.size(), std::move(data), rank}, std::nullopt});
  }
  return out;
}

std::vector<RouterEvent> snapshot_events(std::vector<RouterEvent> events) {
  for (auto& e : events) e.event.event_id = 0;
  auto first_hash = [](const RouterEvent& e) -> std::uint64_t {
    if (const auto* s = std::get_if<KvCacheStoreData>(&e.event.data); s && !s->blocks.empty()) {
      return s->blocks.front().block_hash.value;
    }
    return 0;
  };
  std::stable_sort(events.begin(), events.end(), [&](const RouterEvent& a, const RouterEvent& b) {
    return std::tuple{a.worker_id, a.event.dp_rank, first_hash(a)} <
           std::tuple{b.worker_id, b.event.dp_rank, first_hash(b)};
  });
  return events;
}

}  // namespace kvidx::testing
