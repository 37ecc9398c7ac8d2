#include "bench/common/workloads.h"

#include <algorithm>
#include <unordered_set>

#include "libindexer/hashing.h"

namespace kvidx::bench {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::uint64_t block_local(std::uint64_t seed, std::uint64_t kind, std::uint64_t id, std::uint64_t i) {
  return mix(seed ^ mix(kind * 0x1000003ULL ^ mix(id * 4096 + i)));
}

RouterEvent stored_event(SyntheticWorkload& w, std::size_t worker, std::optional<ExternalSequenceBlockHash> parent,
                         const std::vector<LocalBlockHash>& locals, const std::vector<ExternalSequenceBlockHash>& ext) {
  KvCacheStoreData data;
  if (parent) data.parent_hash = w.name(worker, *parent);
  data.blocks.reserve(locals.size());
  for (std::size_t i = 0; i < locals.size(); ++i) {
    data.blocks.push_back(StoredBlock{w.name(worker, ext[i]), locals[i]});
  }
  return RouterEvent{worker + 1, KvCacheEvent{w.next_event_id[worker]++, std::move(data), 0}, std::nullopt};
}

// Emits the prompt Stored (if the worker lacks it) and the body Stored.
void store_sequence(SyntheticWorkload& w, std::size_t worker, std::uint32_t body, std::vector<RouterEvent>& out) {
  const std::size_t tenant = body % w.options.tenants;
  if (!w.holds_prompt[worker][tenant]) {
    w.holds_prompt[worker][tenant] = true;
    out.push_back(stored_event(w, worker, std::nullopt, w.prompt_local[tenant], w.prompt_ext[tenant]));
  }
  out.push_back(stored_event(w, worker, w.prompt_ext[tenant].back(), w.body_locals[body], w.body_ext[body]));
  w.held[worker].push_back(body);
}

// A body of the worker's tenant that it does not hold yet.
std::uint32_t pick_body(SyntheticWorkload& w, std::size_t worker) {
  const std::size_t tenants = w.options.tenants;
  const std::size_t tenant = worker % tenants;
  const std::size_t per_tenant = (w.options.bodies - tenant + tenants - 1) / tenants;
  const auto& held = w.held[worker];
  for (;;) {
    const auto body = static_cast<std::uint32_t>(tenant + tenants * (w.rng() % per_tenant));
    if (std::find(held.begin(), held.end(), body) == held.end()) return body;
  }
}

}  // namespace

ExternalSequenceBlockHash SyntheticWorkload::name(std::size_t worker, ExternalSequenceBlockHash chain) const {
  if (!options.per_engine_hashes) return chain;
  return ExternalSequenceBlockHash{mix(chain.value ^ mix(options.seed ^ (worker + 1)))};
}

std::vector<LocalBlockHash> SyntheticWorkload::sequence(std::uint32_t body) const {
  std::vector<LocalBlockHash> out = prompt_local[body % options.tenants];
  out.insert(out.end(), body_locals[body].begin(), body_locals[body].end());
  return out;
}

SyntheticWorkload make_synthetic(const SyntheticOptions& options) {
  SyntheticWorkload w;
  w.options = options;
  w.options.tenants = std::max<std::size_t>(1, std::min(options.tenants, options.workers));
  w.options.bodies = std::max(options.bodies, w.options.tenants);
  w.options.prompt_blocks = std::min(options.prompt_blocks, options.depth - 1);
  const auto& o = w.options;
  w.rng.seed(o.seed);
  const std::size_t body_blocks = o.depth - o.prompt_blocks;
  w.prompt_local.resize(o.tenants);
  w.prompt_ext.resize(o.tenants);
  for (std::size_t t = 0; t < o.tenants; ++t) {
    for (std::size_t i = 0; i < o.prompt_blocks; ++i)
      w.prompt_local[t].push_back(LocalBlockHash{block_local(o.seed, 1, t, i)});
    w.prompt_ext[t] = compute_sequence_hashes(w.prompt_local[t]);
  }
  w.body_locals.resize(o.bodies);
  w.body_ext.resize(o.bodies);
  for (std::size_t b = 0; b < o.bodies; ++b) {
    for (std::size_t i = 0; i < body_blocks; ++i)
      w.body_locals[b].push_back(LocalBlockHash{block_local(o.seed, 2, b, i)});
    w.body_ext[b] = compute_sequence_hashes(w.body_locals[b], w.prompt_ext[b % o.tenants].back());
  }
  w.held.assign(o.workers, {});
  w.holds_prompt.assign(o.workers, std::vector<bool>(o.tenants, false));
  w.next_event_id.assign(o.workers, 0);
  // NOTE: round by round over the workers, so every lane has work from the start.
  for (std::size_t round = 0; round < o.sequences_per_worker; ++round) {
    for (std::size_t worker = 0; worker < o.workers; ++worker) store_sequence(w, worker, pick_body(w, worker), w.build);
  }
  std::vector<bool> body_used(o.bodies, false);
  std::vector<bool> prompt_used(o.tenants, false);
  for (std::size_t worker = 0; worker < o.workers; ++worker) {
    for (const auto body : w.held[worker]) body_used[body] = true;
    for (std::size_t t = 0; t < o.tenants; ++t) {
      if (w.holds_prompt[worker][t]) {
        prompt_used[t] = true;
        w.holdings += o.prompt_blocks;
      }
    }
    w.holdings += w.held[worker].size() * body_blocks;
  }
  w.distinct_blocks =
      static_cast<std::uint64_t>(std::count(body_used.begin(), body_used.end(), true)) * body_blocks +
      static_cast<std::uint64_t>(std::count(prompt_used.begin(), prompt_used.end(), true)) * o.prompt_blocks;
  for (const auto& e : w.build) w.stored_blocks += std::get<KvCacheStoreData>(e.event.data).blocks.size();
  return w;
}

std::vector<RouterEvent> make_churn(SyntheticWorkload& w, std::size_t pairs) {
  std::vector<RouterEvent> out;
  out.reserve(pairs * 2 + 16);
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::size_t worker = w.rng() % w.options.workers;
    auto& held = w.held[worker];
    if (held.empty()) continue;
    const std::size_t j = w.rng() % held.size();
    const std::uint32_t body = held[j];
    held[j] = held.back();
    held.pop_back();
    KvCacheRemoveData removed;
    removed.block_hashes.reserve(w.body_ext[body].size());
    for (const auto hash : w.body_ext[body]) removed.block_hashes.push_back(w.name(worker, hash));
    out.push_back(
        RouterEvent{worker + 1, KvCacheEvent{w.next_event_id[worker]++, std::move(removed), 0}, std::nullopt});
    store_sequence(w, worker, pick_body(w, worker), out);
  }
  return out;
}

std::vector<std::vector<LocalBlockHash>> make_queries(const SyntheticWorkload& w, std::size_t count, std::size_t length,
                                                      std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<LocalBlockHash>> out;
  out.reserve(count);
  for (std::size_t q = 0; q < count; ++q) {
    std::size_t worker = rng() % w.options.workers;
    while (w.held[worker].empty()) worker = (worker + 1) % w.options.workers;
    auto seq = w.sequence(w.held[worker][rng() % w.held[worker].size()]);
    for (std::size_t i = seq.size(); i < length; ++i) seq.push_back(LocalBlockHash{mix(rng())});
    seq.resize(length);
    out.push_back(std::move(seq));
  }
  return out;
}

bool make_mooncake_ops(const std::string& trace_path, const WorkloadOptions& options, std::uint64_t sim_duration_ms,
                       std::size_t max_requests, MooncakeOps& out, std::string& error) {
  std::vector<MooncakeRequest> trace;
  if (!load_mooncake_trace(trace_path, trace, error)) return false;
  if (trace.empty()) {
    error = trace_path + ": empty trace";
    return false;
  }
  std::stable_sort(trace.begin(), trace.end(),
                   [](const auto& a, const auto& b) { return a.timestamp_ms < b.timestamp_ms; });
  if (max_requests > 0 && trace.size() > max_requests) trace.resize(max_requests);
  const std::uint64_t first = trace.front().timestamp_ms;
  const std::uint64_t span = std::max<std::uint64_t>(1, trace.back().timestamp_ms - first);
  out.sim_duration_us = sim_duration_ms * 1000;
  std::uint64_t now_us = 0;
  const auto scale = [&](std::uint64_t ts) {
    return static_cast<std::uint64_t>(static_cast<double>(ts - first) / static_cast<double>(span) *
                                      static_cast<double>(out.sim_duration_us));
  };
  WorkloadSink sink;
  sink.on_request = [&](const RoutedRequest& request) {
    now_us = scale(request.timestamp_ms);
    out.ops.push_back({now_us, static_cast<std::uint32_t>(out.requests.size()), true});
    out.requests.push_back(request.local_hashes);
  };
  sink.on_event = [&](RouterEvent&& event) {
    out.ops.push_back({now_us, static_cast<std::uint32_t>(out.events.size()), false});
    out.events.push_back(std::move(event));
  };
  out.stats = simulate_workload(trace, options, sink);
  return true;
}

}  // namespace kvidx::bench
