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
  std::sort(reply.scores.begin(), reply.scores.end(),
            [](const WorkerScore& a, const WorkerScore& b) { return a.worker < b.worker; });
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

std::string encode_score_reply(const ScoreReply& reply) {
  Json scores = Json::array();
  for (const auto& s : reply.scores) {
    scores.push_back({{"worker_id", s.worker.worker_id}, {"dp_rank", s.worker.dp_rank}, {"score", s.score}});
  }
  Json out{{"scores", std::move(scores)},
           {"frequencies", reply.frequencies},
           {"tree_sizes", worker_blocks_json(reply.tree_sizes)}};
  if (reply.active_blocks) out["active_blocks"] = worker_blocks_json(*reply.active_blocks);
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
    const Json& scores = require_array(root, "scores", "", limits.max_hashes);
    for (std::size_t i = 0; i < scores.size(); ++i) {
      const std::string path = join("scores", i);
      WorkerScore ws;
      ws.worker = read_worker(scores[i], path);
      ws.score = read_u32(require(scores[i], "score", path), join(path, "score"));
      reply.scores.push_back(ws);
    }
    const Json& freqs = require_array(root, "frequencies", "", limits.max_hashes);
    for (std::size_t i = 0; i < freqs.size(); ++i) {
      reply.frequencies.push_back(static_cast<std::size_t>(read_u64(freqs[i], join("frequencies", i))));
    }
    reply.tree_sizes = read_worker_blocks(require(root, "tree_sizes", ""), "tree_sizes");
    if (const Json* active = find(root, "active_blocks"); active != nullptr && !active->is_null()) {
      reply.active_blocks = read_worker_blocks(*active, "active_blocks");
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
