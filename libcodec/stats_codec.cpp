#include "libcodec/stats_codec.h"

#include "libcodec/json_reader.h"

namespace kvidx {

using namespace json_reader;

namespace {

using OrderedJson = nlohmann::ordered_json;

// NOTE: Json is nlohmann::json, whose objects keep their keys sorted: the reply's keys come out in
// alphabetical order whatever the order of the rows here.
Json stats_reply_json(const StatsReply& reply) {
  Json by_reason = Json::object();
  for (const auto& [reason, count] : reply.queries_rejected_by_reason) by_reason[reason] = count;
  Json out{{"ready", reply.ready},
           {"not_ready_reason", reply.not_ready_reason},
           {"snapshot_stale", reply.snapshot_stale},
           {"snapshot_age_seconds", reply.snapshot_age_seconds ? Json(*reply.snapshot_age_seconds) : Json(nullptr)},
           {"mode", reply.mode},
           {"queries_rejected_by_reason", std::move(by_reason)}};
  for (const StatsCounter& counter : kStatsCounters) out[counter.key] = reply.*counter.field;
  return out;
}

bool read_bool(const Json& value, std::string_view path) {
  if (!value.is_boolean())
    fail(Kind::wrong_type, std::string(path), "expected a boolean, got " + std::string(type_name(value)));
  return value.get<bool>();
}

OrderedJson histogram_json(const std::map<std::size_t, std::size_t>& histogram) {
  OrderedJson out = OrderedJson::object();
  for (const auto& [length, count] : histogram) out[std::to_string(length)] = count;
  return out;
}

OrderedJson counts_json(const std::vector<std::pair<std::string, std::uint64_t>>& counts) {
  OrderedJson out = OrderedJson::object();
  for (const auto& [name, count] : counts) out[name] = count;
  return out;
}

}  // namespace

std::string encode_stats_reply(const StatsReply& reply) { return stats_reply_json(reply).dump(); }

Decoded<StatsReply> decode_stats_reply(std::string_view json) {
  return guarded([&] {
    const Json root = parse_document(json, 1u << 20, 8);
    require_object(root, "");
    StatsReply out;
    out.ready = read_bool(require(root, "ready", ""), "ready");
    out.not_ready_reason = read_string(require(root, "not_ready_reason", ""), "not_ready_reason");
    out.snapshot_stale = read_bool(require(root, "snapshot_stale", ""), "snapshot_stale");
    const Json& age = require(root, "snapshot_age_seconds", "");
    if (!age.is_null()) {
      if (!age.is_number()) {
        fail(Kind::wrong_type, "snapshot_age_seconds", "expected a number or null, got " + std::string(type_name(age)));
      }
      out.snapshot_age_seconds = age.get<double>();
    }
    out.mode = read_string(require(root, "mode", ""), "mode");
    const Json& by_reason = require(root, "queries_rejected_by_reason", "");
    require_object(by_reason, "queries_rejected_by_reason");
    for (const auto& [reason, count] : by_reason.items()) {
      out.queries_rejected_by_reason[reason] = read_u64(count, join("queries_rejected_by_reason", reason));
    }
    for (const StatsCounter& counter : kStatsCounters) {
      out.*counter.field = read_u64(require(root, counter.key, ""), counter.key);
    }
    return out;
  });
}

std::string encode_live_stats(const StatsReply& reply, const TreeShape& shape) {
  OrderedJson out = OrderedJson::object();
  const Json fields = stats_reply_json(reply);                       // NOTE: named: items() of a temporary would dangle
  for (const auto& [key, value] : fields.items()) out[key] = value;  // alphabetical
  out["distinct_blocks"] = shape.distinct_blocks;
  out["edge_lengths_from"] = shape.edge_lengths_from;
  out["edge_length_histogram"] = histogram_json(shape.edge_length_histogram);
  return out.dump();
}

std::string encode_offline_stats(const OfflineStats& stats) {
  const OrderedJson out{{"workers", stats.workers},
                        {"streams", stats.streams},
                        {"blocks", stats.blocks},
                        {"distinct_blocks", stats.shape.distinct_blocks},
                        {"nodes", stats.nodes},
                        {"edge_lengths_from", stats.shape.edge_lengths_from},
                        {"edge_length_histogram", histogram_json(stats.shape.edge_length_histogram)},
                        {"events_by_type", counts_json(stats.events_by_type)},
                        {"events_by_result", counts_json(stats.events_by_result)},
                        {"duplicates", stats.duplicates},
                        {"gaps", stats.gaps},
                        {"missing_events", stats.missing_events},
                        {"resets", stats.resets},
                        {"bad_lines", stats.bad_lines}};
  return out.dump();
}

}  // namespace kvidx
