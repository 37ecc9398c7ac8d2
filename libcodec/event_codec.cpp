#include "libcodec/event_codec.h"

#include <fmt/format.h>

#include <charconv>

#include "libcodec/fast_event_parser.h"
#include "libcodec/json_reader.h"

namespace kvidx {
namespace {

using namespace json_reader;

std::optional<ExternalSequenceBlockHash> read_optional_hash(const Json& object, std::string_view key,
                                                            std::string_view path) {
  const Json* value = find(object, key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  return ExternalSequenceBlockHash{read_u64(*value, join(path, key))};
}

KvCacheStoreData read_stored(const Json& body, const std::string& path, const DecodeLimits& limits) {
  require_object(body, path);
  KvCacheStoreData data;
  data.parent_hash = read_optional_hash(body, "parent_hash", path);
  if (const Json* start = find(body, "start_position"); start != nullptr && !start->is_null()) {
    data.start_position = read_u32(*start, join(path, "start_position"));
  }
  const std::string blocks_path = join(path, "blocks");
  const Json& blocks = require(body, "blocks", path);
  if (!blocks.is_array())
    fail(Kind::wrong_type, blocks_path, fmt::format("expected an array, got {}", type_name(blocks)));
  if (blocks.size() > limits.max_blocks_per_event) {
    fail(Kind::limit, blocks_path,
         fmt::format("{} blocks exceed the limit of {} per event", blocks.size(), limits.max_blocks_per_event));
  }
  data.blocks.reserve(blocks.size());
  std::vector<std::optional<std::string>> infos;  // sized on the first block that has one
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const Json& block = blocks[i];
    const std::string block_path = join(blocks_path, i);
    require_object(block, block_path);
    StoredBlock out;
    out.block_hash =
        ExternalSequenceBlockHash{read_u64(require(block, "block_hash", block_path), join(block_path, "block_hash"))};
    out.tokens_hash =
        LocalBlockHash{read_u64(require(block, "tokens_hash", block_path), join(block_path, "tokens_hash"))};
    data.blocks.push_back(out);
    if (const Json* mm = find(block, "mm_extra_info"); mm != nullptr && !mm->is_null()) {
      if (!mm->is_object())
        fail(Kind::wrong_type, join(block_path, "mm_extra_info"),
             fmt::format("expected an object or null, got {}", type_name(*mm)));
      infos.resize(blocks.size());
      infos[i] = mm->dump();
    }
  }
  data.mm_extra_infos = std::move(infos);  // empty, or one per block
  return data;
}

KvCacheRemoveData read_removed(const Json& body, const std::string& path, const DecodeLimits& limits) {
  require_object(body, path);
  const std::string hashes_path = join(path, "block_hashes");
  const Json& hashes = require(body, "block_hashes", path);
  if (!hashes.is_array())
    fail(Kind::wrong_type, hashes_path, fmt::format("expected an array, got {}", type_name(hashes)));
  if (hashes.size() > limits.max_blocks_per_event) {
    fail(Kind::limit, hashes_path,
         fmt::format("{} hashes exceed the limit of {} per event", hashes.size(), limits.max_blocks_per_event));
  }
  KvCacheRemoveData data;
  data.block_hashes.reserve(hashes.size());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    data.block_hashes.push_back(ExternalSequenceBlockHash{read_u64(hashes[i], join(hashes_path, i))});
  }
  return data;
}

KvCacheEventData read_data(const Json& data, const std::string& path, const DecodeLimits& limits) {
  // Externally tagged enum: the bare string "cleared", or an object with exactly one variant key.
  if (data.is_string()) {
    const auto name = data.get<std::string>();
    if (name == "cleared") return KvCacheClearData{};
    fail(Kind::invalid_value, path,
         fmt::format("unknown variant '{}' (expected stored, removed or cleared)", untrusted_excerpt(name)));
  }
  if (!data.is_object())
    fail(Kind::wrong_type, path, fmt::format("expected an object or \"cleared\", got {}", type_name(data)));
  if (data.size() != 1)
    fail(Kind::invalid_value, path, fmt::format("expected exactly one variant key, got {}", data.size()));
  const auto variant = data.begin();
  const std::string& name = variant.key();
  const Json& body = variant.value();
  const std::string body_path = join(path, name);
  if (name == "stored") return read_stored(body, body_path, limits);
  if (name == "removed") return read_removed(body, body_path, limits);
  if (name == "cleared") {
    if (!body.is_null() && !(body.is_object() && body.empty())) {
      fail(Kind::wrong_type, body_path, fmt::format("expected null or {{}}, got {}", type_name(body)));
    }
    return KvCacheClearData{};
  }
  fail(Kind::invalid_value, path,
       fmt::format("unknown variant '{}' (expected stored, removed or cleared)", untrusted_excerpt(name)));
}

RouterEvent read_router_event(const Json& root, const std::string& path, const DecodeLimits& limits) {
  require_object(root, path);
  RouterEvent event;
  event.worker_id = read_u64(require(root, "worker_id", path), join(path, "worker_id"));
  if (const Json* tier = find(root, "storage_tier"); tier != nullptr && !tier->is_null()) {
    const auto name = read_string(*tier, join(path, "storage_tier"));
    event.storage_tier = storage_tier_from_string(name);
    if (!event.storage_tier) {
      fail(Kind::invalid_value, join(path, "storage_tier"),
           fmt::format("unknown tier '{}' (expected device, host_pinned, disk or external)", untrusted_excerpt(name)));
    }
  }
  const std::string inner = join(path, "event");
  const Json& body = require(root, "event", path);
  require_object(body, inner);
  event.event.event_id = read_u64(require(body, "event_id", inner), join(inner, "event_id"));
  if (const Json* rank = find(body, "dp_rank"); rank != nullptr) {
    event.event.dp_rank = read_u32(*rank, join(inner, "dp_rank"));
  }
  event.event.data = read_data(require(body, "data", inner), join(inner, "data"), limits);
  return event;
}

void append_u64(std::string& out, std::uint64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, end);
}

void append_json_string(std::string& out, std::string_view text) { out += Json(text).dump(); }

}  // namespace

Decoded<RouterEvent> decode_router_event(std::string_view json, const DecodeLimits& limits) {
  RouterEvent event;
  if (fast_codec::try_decode_router_event(json, limits, event)) return event;
  return decode_router_event_dom(json, limits);
}

Decoded<std::vector<RouterEvent>> decode_router_events(std::string_view json, const DecodeLimits& limits) {
  std::vector<RouterEvent> events;
  if (fast_codec::try_decode_router_events(json, limits, events)) return events;
  return decode_router_events_dom(json, limits);
}

Decoded<EventLogLine> decode_event_log_line(std::string_view line, const DecodeLimits& limits) {
  EventLogLine out;
  if (fast_codec::try_decode_event_log_line(line, limits, out)) return out;
  return decode_event_log_line_dom(line, limits);
}

Decoded<RouterEvent> decode_router_event_dom(std::string_view json, const DecodeLimits& limits) {
  return guarded([&] {
    const Json root = parse_document(json, limits.max_message_bytes, limits.max_nesting_depth);
    return read_router_event(root, "", limits);
  });
}

Decoded<std::vector<RouterEvent>> decode_router_events_dom(std::string_view json, const DecodeLimits& limits) {
  return guarded([&] {
    const Json root = parse_document(json, limits.max_message_bytes, limits.max_nesting_depth);
    std::vector<RouterEvent> events;
    if (!root.is_array()) {
      events.push_back(read_router_event(root, "", limits));
      return events;
    }
    if (root.size() > limits.max_events_per_batch) {
      fail(Kind::limit, "",
           fmt::format("batch of {} events exceeds the limit of {}", root.size(), limits.max_events_per_batch));
    }
    events.reserve(root.size());
    for (std::size_t i = 0; i < root.size(); ++i) events.push_back(read_router_event(root[i], join("", i), limits));
    return events;
  });
}

void append_router_event(std::string& out, const RouterEvent& event) {
  out += R"({"worker_id":)";
  append_u64(out, event.worker_id);
  if (event.storage_tier) {
    out += R"(,"storage_tier":")";
    out += to_string(*event.storage_tier);
    out += '"';
  }
  out += R"(,"event":{"event_id":)";
  append_u64(out, event.event.event_id);
  out += R"(,"data":)";
  if (const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data)) {
    out += R"({"stored":{"parent_hash":)";
    if (stored->parent_hash)
      append_u64(out, stored->parent_hash->value);
    else
      out += "null";
    if (stored->start_position) {
      out += R"(,"start_position":)";
      append_u64(out, *stored->start_position);
    }
    out += R"(,"blocks":[)";
    for (std::size_t i = 0; i < stored->blocks.size(); ++i) {
      const auto& block = stored->blocks[i];
      if (i > 0) out += ',';
      out += R"({"block_hash":)";
      append_u64(out, block.block_hash.value);
      out += R"(,"tokens_hash":)";
      append_u64(out, block.tokens_hash.value);
      if (const std::string* info = stored->mm_extra_info(i)) {
        out += R"(,"mm_extra_info":)";
        out += *info;
      }
      out += '}';
    }
    out += "]}}";
  } else if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    out += R"({"removed":{"block_hashes":[)";
    for (std::size_t i = 0; i < removed->block_hashes.size(); ++i) {
      if (i > 0) out += ',';
      append_u64(out, removed->block_hashes[i].value);
    }
    out += "]}}";
  } else {
    out += R"("cleared")";
  }
  out += R"(,"dp_rank":)";
  append_u64(out, event.event.dp_rank);
  out += "}}";
}

std::string encode_router_event(const RouterEvent& event) {
  std::string out;
  append_router_event(out, event);
  return out;
}

std::string encode_router_events(std::span<const RouterEvent> events) {
  std::string out = "[";
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (i > 0) out += ',';
    append_router_event(out, events[i]);
  }
  out += ']';
  return out;
}

Decoded<EventLogLine> decode_event_log_line_dom(std::string_view line, const DecodeLimits& limits) {
  return guarded([&] {
    const Json root = parse_document(line, limits.max_message_bytes, limits.max_nesting_depth);
    require_object(root, "");
    EventLogLine out;
    // A capture wrapper has "event" holding a whole RouterEvent (with its own worker_id); a bare
    // RouterEvent has "worker_id" at the top level.
    if (root.contains("worker_id")) {
      out.event = read_router_event(root, "", limits);
      return out;
    }
    out.event = read_router_event(require(root, "event", ""), "event", limits);
    if (const Json* ts = find(root, "ts"); ts != nullptr && !ts->is_null()) {
      if (!ts->is_number()) fail(Kind::wrong_type, "ts", fmt::format("expected a number, got {}", type_name(*ts)));
      out.ts = ts->get<double>();
    }
    if (const Json* subject = find(root, "subject"); subject != nullptr && !subject->is_null()) {
      out.subject = read_string(*subject, "subject");
    }
    return out;
  });
}

std::string encode_event_log_line(const EventLogLine& line) {
  if (!line.ts && !line.subject) return encode_router_event(line.event);
  std::string out = "{";
  if (line.ts) out += fmt::format(R"("ts":{:.6f},)", *line.ts);
  if (line.subject) {
    out += R"("subject":)";
    append_json_string(out, *line.subject);
    out += ',';
  }
  out += R"("event":)";
  append_router_event(out, line.event);
  out += '}';
  return out;
}

}  // namespace kvidx
