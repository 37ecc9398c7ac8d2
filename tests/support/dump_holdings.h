// What a dump (`kvidx dump` JSONL, one Stored event per line) says is held, independent of how the
// blocks were grouped into events: a set of (worker_id, dp_rank, parent hash, block hash, storage
// tier). Two dumps of the same index compare equal this way however the tree was split.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

namespace kvidx::testing {

using DumpHolding = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, std::string>;

inline std::set<DumpHolding> dump_holdings(const std::string& jsonl) {
  std::set<DumpHolding> out;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto doc = nlohmann::json::parse(line);
    const auto& stored = doc["event"]["data"]["stored"];
    std::uint64_t parent = stored["parent_hash"].is_null() ? 0 : stored["parent_hash"].get<std::uint64_t>();
    const auto tier = doc.value("storage_tier", nlohmann::json("device"));
    const std::string tier_name = tier.is_null() ? "device" : tier.get<std::string>();
    for (const auto& block : stored["blocks"]) {
      const auto hash = block["block_hash"].get<std::uint64_t>();
      out.emplace(doc["worker_id"].get<std::uint64_t>(), doc["event"]["dp_rank"].get<std::uint64_t>(), parent, hash,
                  tier_name);
      parent = hash;
    }
  }
  return out;
}

}  // namespace kvidx::testing
