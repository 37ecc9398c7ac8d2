#include "libcodec/query_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "libcodec/json_reader.h"
#include "libindexer/hashing.h"

namespace kvidx {
namespace {

using namespace json_reader;

const Json& require_array(const Json& object, std::string_view key, std::string_view path, std::size_t max) {
  const Json& value = require(object, key, path);
  const std::string field = join(path, key);
  if (!value.is_array()) fail(Kind::wrong_type, field, fmt::format("expected an array, got {}", type_name(value)));
  if (value.size() > max) fail(Kind::limit, field, fmt::format("{} entries exceed the limit of {}", value.size(), max));
  return value;
}

WorkerWithDpRank read_worker(const Json& item, const std::string& path) {
  require_object(item, path);
  WorkerWithDpRank w;
  w.worker_id = read_u64(require(item, "worker_id", path), join(path, "worker_id"));
  w.dp_rank = read_u32(require(item, "dp_rank", path), join(path, "dp_rank"));
  return w;
}

std::vector<WorkerBlocks> read_worker_blocks(const Json& array, const std::string& path) {
  if (!array.is_array()) fail(Kind::wrong_type, path, fmt::format("expected an array, got {}", type_name(array)));
  std::vector<WorkerBlocks> out;
  out.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const std::string item_path = join(path, i);
    WorkerBlocks wb;
    wb.worker = read_worker(array[i], item_path);
    wb.blocks = read_u64(require(array[i], "blocks", item_path), join(item_path, "blocks"));
    out.push_back(wb);
  }
  return out;
}

std::vector<WorkerScore> read_worker_scores(const Json& array, const std::string& path, std::size_t max) {
  if (!array.is_array()) fail(Kind::wrong_type, path, fmt::format("expected an array, got {}", type_name(array)));
  if (array.size() > max) fail(Kind::limit, path, fmt::format("{} entries exceed the limit of {}", array.size(), max));
  std::vector<WorkerScore> out;
  out.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const std::string item_path = join(path, i);
    WorkerScore ws;
    ws.worker = read_worker(array[i], item_path);
    ws.score = read_u32(require(array[i], "score", item_path), join(item_path, "score"));
    out.push_back(ws);
  }
  return out;
}

double read_number(const Json& value, std::string_view path) {
  if (!value.is_number()) {
    fail(Kind::wrong_type, std::string(path), fmt::format("expected a number, got {}", type_name(value)));
  }
  return value.get<double>();
}

Json worker_scores_json(const std::vector<WorkerScore>& items) {
  Json out = Json::array();
  for (const auto& s : items) {
    out.push_back({{"worker_id", s.worker.worker_id}, {"dp_rank", s.worker.dp_rank}, {"score", s.score}});
  }
  return out;
}

template <typename Item>
void sort_by_worker(std::vector<Item>& items) {
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.worker < b.worker; });
}

Json worker_blocks_json(const std::vector<WorkerBlocks>& items) {
  Json out = Json::array();
  for (const auto& wb : items) {
    out.push_back({{"worker_id", wb.worker.worker_id}, {"dp_rank", wb.worker.dp_rank}, {"blocks", wb.blocks}});
  }
  return out;
}

}  // namespace

Decoded<ScoreRequest> decode_score_request(std::string_view json, const QueryLimits& limits) {
  return guarded([&] {
    const Json root = parse_document(json, limits.max_message_bytes, limits.max_nesting_depth);
    require_object(root, "");
    ScoreRequest request;
    const bool has_hashes = root.contains("local_hashes");
    const bool has_tokens = root.contains("token_ids");
    if (has_hashes == has_tokens) fail(Kind::invalid_value, "", "expected exactly one of local_hashes or token_ids");
    if (const Json* early = find(root, "early_exit"); early != nullptr && !early->is_null()) {
      if (!early->is_boolean())
        fail(Kind::wrong_type, "early_exit", fmt::format("expected a boolean, got {}", type_name(*early)));
      request.early_exit = early->get<bool>();
    }
    if (has_hashes) {
      const Json& hashes = require_array(root, "local_hashes", "", limits.max_hashes);
      request.local_hashes.reserve(hashes.size());
      for (std::size_t i = 0; i < hashes.size(); ++i) {
        request.local_hashes.push_back(LocalBlockHash{read_u64(hashes[i], join("local_hashes", i))});
      }
      return request;
    }
    const Json& tokens = require_array(root, "token_ids", "", limits.max_hashes * 64);
    const std::uint32_t block_size = read_u32(require(root, "block_size", ""), "block_size");
    if (block_size == 0) fail(Kind::invalid_value, "block_size", "must be at least 1");
    std::string lora;
    if (const Json* name = find(root, "lora_name"); name != nullptr && !name->is_null()) {
      lora = read_string(*name, "lora_name");
    }
    bool eagle = false;
    if (const Json* flag = find(root, "eagle"); flag != nullptr && !flag->is_null()) {
      if (!flag->is_boolean())
        fail(Kind::wrong_type, "eagle", fmt::format("expected a boolean, got {}", type_name(*flag)));
      eagle = flag->get<bool>();
    }
    std::vector<std::uint32_t> ids;
    ids.reserve(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) ids.push_back(read_u32(tokens[i], join("token_ids", i)));
    request.local_hashes = compute_block_hashes(ids, block_size, BlockHashOptions{block_hash_seed(lora), eagle, {}});
    return request;
  });
}

std::string encode_score_request(const ScoreRequest& request) {
  Json hashes = Json::array();
  for (const auto& h : request.local_hashes) hashes.push_back(h.value);
  Json out{{"local_hashes", std::move(hashes)}};
  if (request.early_exit) out["early_exit"] = true;
  return out.dump();
}

std::string encode_token_score_request(const std::vector<std::uint32_t>& token_ids, std::uint32_t block_size,
                                       std::string_view lora_name, bool eagle, bool early_exit) {
  Json out{{"token_ids", token_ids}, {"block_size", block_size}};
  if (!lora_name.empty()) out["lora_name"] = std::string(lora_name);
  if (eagle) out["eagle"] = true;
  if (early_exit) out["early_exit"] = true;
  return out.dump();
}

ScoreReply make_score_reply(const OverlapScores& scores, const StreamLoads& loads) {
  ScoreReply reply;
  reply.scores.reserve(scores.scores.size());
  for (const auto& [worker, score] : scores.scores) reply.scores.push_back(WorkerScore{worker, score});
  sort_by_worker(reply.scores);
  reply.frequencies = scores.frequencies;
  reply.tree_sizes.reserve(scores.tree_sizes.size());
  for (const auto& [worker, blocks] : scores.tree_sizes) reply.tree_sizes.push_back(WorkerBlocks{worker, blocks});
  std::sort(reply.tree_sizes.begin(), reply.tree_sizes.end(),
            [](const WorkerBlocks& a, const WorkerBlocks& b) { return a.worker < b.worker; });
  if (!loads.empty()) {
    std::vector<WorkerBlocks> active;
    active.reserve(loads.size());
    for (const auto& [stream, blocks] : loads) active.push_back(WorkerBlocks{stream, blocks});
    std::sort(active.begin(), active.end(),
              [](const WorkerBlocks& a, const WorkerBlocks& b) { return a.worker < b.worker; });
    reply.active_blocks = std::move(active);
  }
  return reply;
}

ScoreReply make_score_reply(const TieredOverlapScores& scores, const TierWeights& weights, const StreamLoads& loads) {
  ScoreReply reply = make_score_reply(scores.device, loads);
  for (std::size_t i = 0; i < kLowerTierCount; ++i) {
    TierScores tier{kStorageTiers[i + 1], {}};
    for (const auto& [worker, score] : scores.lower[i]) {
      if (score > 0) tier.scores.push_back(WorkerScore{worker, score});
    }
    if (tier.scores.empty()) continue;
    sort_by_worker(tier.scores);
    reply.tier_scores.push_back(std::move(tier));
  }
  // NOTE: absent when it would only repeat `scores` (no lower tier scored, device weight 1), so a
  // device-only fleet's replies stay byte for byte what they were.
  if (!reply.tier_scores.empty() || weights.of(StorageTier::device) != 1.0) {
    std::vector<WorkerCombinedScore> combined;
    for (const auto& [worker, score] : combined_scores(scores, weights)) {
      combined.push_back(WorkerCombinedScore{worker, score});
    }
    sort_by_worker(combined);
    reply.combined_scores = std::move(combined);
  }
  return reply;
}

std::string encode_score_reply(const ScoreReply& reply) {
  Json out{{"scores", worker_scores_json(reply.scores)},
           {"frequencies", reply.frequencies},
           {"tree_sizes", worker_blocks_json(reply.tree_sizes)}};
  if (reply.active_blocks) out["active_blocks"] = worker_blocks_json(*reply.active_blocks);
  if (!reply.tier_scores.empty()) {
    Json tiers = Json::object();
    for (const auto& tier : reply.tier_scores)
      tiers[std::string(to_string(tier.tier))] = worker_scores_json(tier.scores);
    out["tier_scores"] = std::move(tiers);
  }
  if (reply.combined_scores) {
    Json combined = Json::array();
    for (const auto& c : *reply.combined_scores) {
      combined.push_back({{"worker_id", c.worker.worker_id}, {"dp_rank", c.worker.dp_rank}, {"score", c.score}});
    }
    out["combined_scores"] = std::move(combined);
  }
  return out.dump();
}

Decoded<ScoreReply> decode_score_reply(std::string_view json, const QueryLimits& limits) {
  return guarded([&] {
    const Json root = parse_document(json, limits.max_message_bytes, limits.max_nesting_depth);
    require_object(root, "");
    if (const Json* error = find(root, "error"); error != nullptr) {
      const auto decoded = decode_error_reply(json);
      fail(
          Kind::invalid_value, "error",
          decoded ? untrusted_excerpt(decoded->code + ": " + decoded->message, kReasonBytes) : "malformed error reply");
    }
    ScoreReply reply;
    reply.scores = read_worker_scores(require(root, "scores", ""), "scores", limits.max_hashes);
    const Json& freqs = require_array(root, "frequencies", "", limits.max_hashes);
    for (std::size_t i = 0; i < freqs.size(); ++i) {
      reply.frequencies.push_back(static_cast<std::size_t>(read_u64(freqs[i], join("frequencies", i))));
    }
    reply.tree_sizes = read_worker_blocks(require(root, "tree_sizes", ""), "tree_sizes");
    if (const Json* active = find(root, "active_blocks"); active != nullptr && !active->is_null()) {
      reply.active_blocks = read_worker_blocks(*active, "active_blocks");
    }
    if (const Json* tiers = find(root, "tier_scores"); tiers != nullptr && !tiers->is_null()) {
      require_object(*tiers, "tier_scores");
      // NOTE: in tier order whatever the order of the object's keys.
      for (const StorageTier tier : kStorageTiers) {
        if (tier == StorageTier::device) continue;
        if (const Json* scores = find(*tiers, to_string(tier)); scores != nullptr) {
          const std::string path = join("tier_scores", to_string(tier));
          reply.tier_scores.push_back(TierScores{tier, read_worker_scores(*scores, path, limits.max_hashes)});
        }
      }
      for (const auto& [name, _] : tiers->items()) {
        const auto tier = storage_tier_from_string(name);
        if (!tier || *tier == StorageTier::device) {
          fail(Kind::invalid_value, join("tier_scores", untrusted_excerpt(name)),
               "unknown tier (expected host_pinned, disk or external; device scores are `scores`)");
        }
      }
    }
    if (const Json* combined = find(root, "combined_scores"); combined != nullptr && !combined->is_null()) {
      if (!combined->is_array()) {
        fail(Kind::wrong_type, "combined_scores", fmt::format("expected an array, got {}", type_name(*combined)));
      }
      std::vector<WorkerCombinedScore> out;
      for (std::size_t i = 0; i < combined->size(); ++i) {
        const std::string path = join("combined_scores", i);
        WorkerCombinedScore c;
        c.worker = read_worker((*combined)[i], path);
        c.score = read_number(require((*combined)[i], "score", path), join(path, "score"));
        out.push_back(c);
      }
      reply.combined_scores = std::move(out);
    }
    return reply;
  });
}

std::string encode_error_reply(const ErrorReply& error) {
  return Json{{"error", {{"code", error.code}, {"message", error.message}}}}.dump(-1, ' ', false,
                                                                                  Json::error_handler_t::replace);
}

std::string encode_ok_reply() { return R"({"ok":true})"; }

std::string encode_workers_reply(const WorkersReply& reply) {
  return Json{{"workers", reply.workers}, {"streams", worker_blocks_json(reply.streams)}}.dump();
}

Decoded<WorkersReply> decode_workers_reply(std::string_view json) {
  return guarded([&] {
    const Json root = parse_document(json, std::numeric_limits<std::size_t>::max(), 8);
    require_object(root, "");
    WorkersReply reply;
    const Json& workers = require(root, "workers", "");
    if (!workers.is_array())
      fail(Kind::wrong_type, "workers", fmt::format("expected an array, got {}", type_name(workers)));
    reply.workers.reserve(workers.size());
    for (std::size_t i = 0; i < workers.size(); ++i) reply.workers.push_back(read_u64(workers[i], join("workers", i)));
    reply.streams = read_worker_blocks(require(root, "streams", ""), "streams");
    return reply;
  });
}

bool is_ok_reply(std::string_view json) {
  auto decoded = guarded([&] {
    const Json root = parse_document(json, 1024, 2);
    require_object(root, "");
    const Json* ok = find(root, "ok");
    return ok != nullptr && ok->is_boolean() && ok->get<bool>();
  });
  return decoded.ok() && decoded.value();
}

std::optional<ErrorReply> decode_error_reply(std::string_view json) {
  auto decoded = guarded([&] {
    const Json root = parse_document(json, 1u << 20, 8);
    require_object(root, "");
    const Json& error = require(root, "error", "");
    require_object(error, "error");
    ErrorReply out;
    out.code = read_string(require(error, "code", "error"), "error.code");
    out.message = read_string(require(error, "message", "error"), "error.message");
    return out;
  });
  if (!decoded.ok()) return std::nullopt;
  return std::move(decoded).value();
}

Decoded<RemoveWorkerRequest> decode_remove_worker_request(std::string_view json) {
  return guarded([&] {
    const Json root = parse_document(json, 1u << 16, 4);
    require_object(root, "");
    RemoveWorkerRequest request;
    request.worker_id = read_u64(require(root, "worker_id", ""), "worker_id");
    if (const Json* rank = find(root, "dp_rank"); rank != nullptr && !rank->is_null()) {
      request.dp_rank = read_u32(*rank, "dp_rank");
    }
    return request;
  });
}

std::string encode_remove_worker_request(const RemoveWorkerRequest& request) {
  Json out{{"worker_id", request.worker_id}};
  if (request.dp_rank) out["dp_rank"] = *request.dp_rank;
  return out.dump();
}

}  // namespace kvidx
