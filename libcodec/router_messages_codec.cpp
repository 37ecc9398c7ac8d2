#include "libcodec/router_messages_codec.h"

#include <fmt/format.h>

#include "libcodec/json_reader.h"

namespace kvidx {
namespace {

using namespace json_reader;

template <class Hash>
std::vector<Hash> read_hashes(const Json& object, std::string_view key, std::size_t max) {
  const Json& array = require(object, key, "");
  const std::string field(key);
  if (!array.is_array()) fail(Kind::wrong_type, field, fmt::format("expected an array, got {}", type_name(array)));
  if (array.size() > max) fail(Kind::limit, field, fmt::format("{} entries exceed the limit of {}", array.size(), max));
  std::vector<Hash> out;
  out.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) out.push_back(Hash{read_u64(array[i], join(field, i))});
  return out;
}

// An optional field: absent and null read alike.
const Json* optional_field(const Json& object, std::string_view key) {
  const Json* value = find(object, key);
  return value == nullptr || value->is_null() ? nullptr : value;
}

Json hashes_json(const auto& hashes) {
  Json out = Json::array();
  for (const auto& h : hashes) out.push_back(h.value);
  return out;
}

constexpr std::string_view kOps[] = {"admit", "output", "fraction", "finish"};  // LifecycleOp order

}  // namespace

Decoded<RoutingDecision> decode_routing_decision(std::string_view json, const QueryLimits& limits) {
  return guarded([&] {
    const Json root = parse_document(json, limits.max_message_bytes, limits.max_nesting_depth);
    require_object(root, "");
    RoutingDecision out;
    out.stream.worker_id = read_u64(require(root, "worker_id", ""), "worker_id");
    if (const Json* rank = optional_field(root, "dp_rank")) out.stream.dp_rank = read_u32(*rank, "dp_rank");
    out.local_hashes = read_hashes<LocalBlockHash>(root, "local_hashes", limits.max_hashes);
    if (optional_field(root, "sequence_hashes") != nullptr) {
      out.sequence_hashes = read_hashes<ExternalSequenceBlockHash>(root, "sequence_hashes", limits.max_hashes);
    }
    return out;
  });
}

std::string encode_routing_decision(const RoutingDecision& decision) {
  Json out{{"worker_id", decision.stream.worker_id},
           {"dp_rank", decision.stream.dp_rank},
           {"local_hashes", hashes_json(decision.local_hashes)}};
  if (decision.sequence_hashes) out["sequence_hashes"] = hashes_json(*decision.sequence_hashes);
  return out.dump();
}

Decoded<RequestLifecycle> decode_request_lifecycle(std::string_view json, const QueryLimits& limits) {
  return guarded([&] {
    const Json root = parse_document(json, limits.max_message_bytes, limits.max_nesting_depth);
    require_object(root, "");
    RequestLifecycle out;
    const std::string op = read_string(require(root, "op", ""), "op");
    out.request_id = read_string(require(root, "request_id", ""), "request_id");
    if (op == "admit") {
      out.op = LifecycleOp::admit;
      out.block_hashes = read_hashes<ExternalSequenceBlockHash>(root, "block_hashes", limits.max_hashes);
      if (const Json* rank = optional_field(root, "dp_rank")) out.dp_rank = read_u32(*rank, "dp_rank");
    } else if (op == "output") {
      out.op = LifecycleOp::output;
      out.block_hash = ExternalSequenceBlockHash{read_u64(require(root, "block_hash", ""), "block_hash")};
    } else if (op == "fraction") {
      out.op = LifecycleOp::fraction;
      const Json& fraction = require(root, "fraction", "");
      if (!fraction.is_number()) {
        fail(Kind::wrong_type, "fraction", fmt::format("expected a number, got {}", type_name(fraction)));
      }
      out.fraction = fraction.get<double>();  // its range is ActiveLoad's to check (invalid_fraction)
    } else if (op == "finish") {
      out.op = LifecycleOp::finish;
    } else {
      fail(Kind::invalid_value, "op", "unknown op " + untrusted_excerpt(op));
    }
    return out;
  });
}

std::string encode_request_lifecycle(const RequestLifecycle& message) {
  Json out{{"op", kOps[static_cast<std::size_t>(message.op)]}, {"request_id", message.request_id}};
  switch (message.op) {
    case LifecycleOp::admit:
      out["dp_rank"] = message.dp_rank;
      out["block_hashes"] = hashes_json(message.block_hashes);
      break;
    case LifecycleOp::output: out["block_hash"] = message.block_hash.value; break;
    case LifecycleOp::fraction: out["fraction"] = message.fraction; break;
    case LifecycleOp::finish: break;
  }
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace kvidx
