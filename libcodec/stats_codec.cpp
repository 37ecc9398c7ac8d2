#include "libcodec/stats_codec.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "libcodec/json_reader.h"

namespace kvidx {

using namespace json_reader;

namespace {

using OrderedJson = nlohmann::ordered_json;

Json tiers_json(const std::map<std::string, TierStats>& tiers) {
  Json out = Json::object();
  for (const auto& [name, t] : tiers) {
    out[name] =
        Json{{"streams", t.streams}, {"blocks", t.blocks}, {"nodes", t.nodes}, {"events_applied", t.events_applied}};
  }
  return out;
}

std::map<std::string, TierStats> read_tiers(const Json& value) {
  require_object(value, "tiers");
  std::map<std::string, TierStats> out;
  for (const auto& [name, t] : value.items()) {
    const std::string path = join("tiers", name);
    require_object(t, path);
    out[name] = TierStats{read_u64(require(t, "streams", path), join(path, "streams")),
                          read_u64(require(t, "blocks", path), join(path, "blocks")),
                          read_u64(require(t, "nodes", path), join(path, "nodes")),
                          read_u64(require(t, "events_applied", path), join(path, "events_applied"))};
  }
  return out;
}

Json digest_json(const StatsDigest& digest) {
  if (!digest.error.empty()) return Json{{"error", digest.error}};
  Json out{{"total", digest.total}, {"blocks", digest.blocks}, {"streams", digest.streams}};
  if (digest.position) out["position"] = *digest.position;
  if (digest.by_stream) {
    Json lines = Json::array();
    for (const StreamDigestLine& d : *digest.by_stream) {
      lines.push_back(Json{{"worker_id", d.worker_id},
                           {"dp_rank", d.dp_rank},
                           {"tier", d.tier},
                           {"blocks", d.blocks},
                           {"digest", d.digest}});
    }
    out["by_stream"] = std::move(lines);
  }
  return out;
}

StatsDigest read_digest(const Json& value) {
  require_object(value, "digest");
  StatsDigest out;
  if (const Json* error = find(value, "error"); error != nullptr) {
    out.error = read_string(*error, "digest.error");
    return out;
  }
  out.total = read_string(require(value, "total", "digest"), "digest.total");
  out.blocks = read_u64(require(value, "blocks", "digest"), "digest.blocks");
  out.streams = read_u64(require(value, "streams", "digest"), "digest.streams");
  if (const Json* position = find(value, "position"); position != nullptr) {
    out.position = read_u64(*position, "digest.position");
  }
  if (const Json* lines = find(value, "by_stream"); lines != nullptr) {
    if (!lines->is_array()) {
      fail(Kind::wrong_type, "digest.by_stream", "expected an array, got " + std::string(type_name(*lines)));
    }
    out.by_stream.emplace();
    for (std::size_t i = 0; i < lines->size(); ++i) {
      const Json& line = (*lines)[i];
      const std::string path = join("digest.by_stream", i);
      require_object(line, path);
      out.by_stream->push_back(StreamDigestLine{read_u64(require(line, "worker_id", path), join(path, "worker_id")),
                                                read_u64(require(line, "dp_rank", path), join(path, "dp_rank")),
                                                read_string(require(line, "tier", path), join(path, "tier")),
                                                read_u64(require(line, "blocks", path), join(path, "blocks")),
                                                read_string(require(line, "digest", path), join(path, "digest"))});
    }
  }
  return out;
}

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
           {"queries_rejected_by_reason", std::move(by_reason)},
           {"replica", reply.replica},
           {"restored_from", reply.restored_from},
           {"tiers", tiers_json(reply.tiers)},
           {"tier_weights", Json(reply.tier_weights)}};
  for (const StatsCounter& counter : kStatsCounters) out[counter.key] = reply.*counter.field;
  if (reply.digest) out["digest"] = digest_json(*reply.digest);
  if (!reply.shard.empty()) out["shard"] = reply.shard;
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
    out.replica = read_string(require(root, "replica", ""), "replica");
    out.restored_from = read_string(require(root, "restored_from", ""), "restored_from");
    out.tiers = read_tiers(require(root, "tiers", ""));
    const Json& weights = require(root, "tier_weights", "");
    require_object(weights, "tier_weights");
    for (const auto& [name, w] : weights.items()) {
      if (!w.is_number()) {
        fail(Kind::wrong_type, join("tier_weights", name), "expected a number, got " + std::string(type_name(w)));
      }
      out.tier_weights[name] = w.get<double>();
    }
    for (const StatsCounter& counter : kStatsCounters) {
      out.*counter.field = read_u64(require(root, counter.key, ""), counter.key);
    }
    if (const Json* digest = find(root, "digest"); digest != nullptr) out.digest = read_digest(*digest);
    if (const Json* shard = find(root, "shard"); shard != nullptr) out.shard = read_string(*shard, "shard");
    return out;
  });
}

DigestDetail decode_stats_request(std::string_view json) {
  const Json body = Json::parse(json, nullptr, false);
  if (!body.is_object() || !body.contains("digest")) return DigestDetail::none;
  const Json& digest = body.at("digest");
  if (digest == true || digest == "streams") return DigestDetail::streams;
  if (digest == "total") return DigestDetail::total;
  return DigestDetail::none;
}

std::string encode_replicas_summary(std::vector<StatsReply> replies) {
  std::sort(replies.begin(), replies.end(), [](const StatsReply& a, const StatsReply& b) {
    return std::tie(a.shard, a.replica) < std::tie(b.shard, b.replica);
  });
  // NOTE: per shard ("" = unsharded): replicas of different shards hold different workers.
  std::map<std::string, std::set<std::uint64_t>> positions;
  std::map<std::string, std::set<std::string>> totals;
  Json by_replica = Json::array();
  for (const StatsReply& r : replies) {
    if (r.digest) {
      positions[r.shard].insert(r.digest->position.value_or(0));
      totals[r.shard].insert(r.digest->total);
    }
    Json one{{"replica", r.replica},
             {"ready", r.ready},
             {"not_ready_reason", r.not_ready_reason},
             {"acked_sequence", r.acked_sequence},
             {"restored_from", r.restored_from},
             {"stream_replicas", r.stream_replicas},
             {"streams", r.streams},
             {"blocks", r.blocks}};
    if (r.digest) one["digest"] = digest_json(*r.digest);
    if (!r.shard.empty()) one["shard"] = r.shard;
    by_replica.push_back(std::move(one));
  }
  bool same_position = !positions.empty();
  bool agree = true;
  for (const auto& [shard, seen] : positions) same_position = same_position && seen.size() == 1;
  for (const auto& [shard, seen] : totals) agree = agree && seen.size() == 1;
  Json out{{"replicas", replies.size()}, {"same_position", same_position}};
  out["agree"] = same_position ? Json(agree) : Json(nullptr);
  out["by_replica"] = std::move(by_replica);
  return out.dump();
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
                        {"tiers", tiers_json(stats.tiers)},
                        {"edge_lengths_from", stats.shape.edge_lengths_from},
                        {"edge_length_histogram", histogram_json(stats.shape.edge_length_histogram)},
                        {"events_by_type", counts_json(stats.events_by_type)},
                        {"events_by_result", counts_json(stats.events_by_result)},
                        {"duplicates", stats.duplicates},
                        {"gaps", stats.gaps},
                        {"missing_events", stats.missing_events},
                        {"resets", stats.resets},
                        {"bad_lines", stats.bad_lines}};
  if (!stats.digest) return out.dump();
  OrderedJson with_digest = out;
  with_digest["digest"] = digest_json(*stats.digest);
  return with_digest.dump();
}

}  // namespace kvidx
