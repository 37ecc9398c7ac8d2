// The RouterEvent a worker speaking kvidx's wire format directly would send for a fake engine's
// event: the bridge tests compare what the bridge produced with this independent conversion.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "libindexer/hashing.h"
#include "libindexer/protocol.h"
#include "tests/bridge/fake_vllm_engine.h"

namespace kvidx::testing {

// What a worker speaking RouterEvents directly would send for engine event `e` (tokens_hash
// from the engine's tokens with the options the event implies, computed here independently).
inline RouterEvent direct_event(WorkerId worker, DpRank rank, std::uint64_t event_id, const EngineEvent& e) {
  RouterEvent r;
  r.worker_id = worker;
  r.event.dp_rank = rank;
  r.event.event_id = event_id;
  if (const auto* s = std::get_if<EngineStored>(&e)) {
    std::vector<std::vector<std::uint64_t>> mm;
    if (s->extra_keys) {
      for (const auto& block : *s->extra_keys) {
        mm.emplace_back();
        if (!block) continue;
        for (const std::string& key : *block) {
          if (key.size() == 64) mm.back().push_back(std::stoull(key.substr(0, 16), nullptr, 16));
        }
      }
    }
    const BlockHashOptions options{block_hash_seed(s->lora_name.value_or("")), s->bigrams, mm};
    const auto locals = compute_block_hashes(s->tokens, s->block_size, options);
    KvCacheStoreData data;
    if (s->parent) data.parent_hash = ExternalSequenceBlockHash{*s->parent};
    for (std::size_t i = 0; i < locals.size() && i < s->hashes.size(); ++i) {
      data.blocks.push_back({ExternalSequenceBlockHash{s->hashes[i]}, locals[i]});
    }
    r.event.data = data;
  } else if (const auto* rm = std::get_if<EngineRemoved>(&e)) {
    KvCacheRemoveData data;
    for (auto h : rm->hashes) data.block_hashes.push_back(ExternalSequenceBlockHash{h});
    r.event.data = data;
  } else {
    r.event.data = KvCacheClearData{};
  }
  return r;
}

}  // namespace kvidx::testing
