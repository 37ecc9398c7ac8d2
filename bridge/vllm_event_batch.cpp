// msgpack walk over vLLM's KVEventBatch. msgpack-cxx only parses (object tree with references
// into the payload); every type check and conversion is done here so errors name the field.
#include "bridge/vllm_event_batch.h"

#include "bridge/vllm_extra_keys.h"
#include "libcodec/untrusted_text.h"

#include <msgpack.hpp>

#include <exception>
#include <limits>
#include <string_view>
#include <utility>

namespace kvidx::bridge {
namespace {

using Object = msgpack::object;

CodecError fail(std::string field, std::string reason) { return CodecError{std::move(field), std::move(reason)}; }

std::string_view type_name(const Object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "bool";
    case msgpack::type::POSITIVE_INTEGER: return "positive int";
    case msgpack::type::NEGATIVE_INTEGER: return "negative int";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "str";
    case msgpack::type::BIN: return "bin";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "ext";
  }
  return "unknown";
}

CodecError wrong_type(const std::string& field, std::string_view expected, const Object& o) {
  return fail(field, "expected " + std::string(expected) + ", got " + std::string(type_name(o)));
}

std::span<const Object> as_array(const Object& o) { return {o.via.array.ptr, o.via.array.size}; }
std::optional<CodecError> read_hash(const Object& o, const std::string& field, std::uint64_t& out) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER: out = o.via.u64; return std::nullopt;
    // NOTE: vLLM wraps hashes >= 2^63 into i64 before encoding; the cast restores the u64 bits.
    case msgpack::type::NEGATIVE_INTEGER: out = static_cast<std::uint64_t>(o.via.i64); return std::nullopt;
    case msgpack::type::BIN:
      out = block_hash_from_bytes(std::as_bytes(std::span<const char>(o.via.bin.ptr, o.via.bin.size)));
      return std::nullopt;
    default: return wrong_type(field, "int or bin block hash", o);
  }
}

std::optional<CodecError> read_hashes(const Object& o, const std::string& field, std::vector<std::uint64_t>& out) {
  if (o.type != msgpack::type::ARRAY) return wrong_type(field, "array of block hashes", o);
  const auto items = as_array(o);
  out.resize(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (auto e = read_hash(items[i], field + "[" + std::to_string(i) + "]", out[i])) return e;
  }
  return std::nullopt;
}

std::optional<CodecError> read_optional_hash(const Object& o, const std::string& field,
                                             std::optional<std::uint64_t>& out) {
  if (o.type == msgpack::type::NIL) return std::nullopt;
  std::uint64_t value = 0;
  if (auto e = read_hash(o, field, value)) return e;
  out = value;
  return std::nullopt;
}

std::optional<CodecError> read_token(const Object& t, const std::string& field, std::uint32_t& out) {
  if (t.type != msgpack::type::POSITIVE_INTEGER || t.via.u64 > std::numeric_limits<std::uint32_t>::max()) {
    return fail(field, "expected a token id in [0, 2^32)");
  }
  out = static_cast<std::uint32_t>(t.via.u64);
  return std::nullopt;
}

// Eagle bigrams [[t0, t1], [t1, t2], ...] -> t0, t1, t2, ...: every pair's first, then the last
// pair's second.
std::optional<CodecError> read_bigram_tokens(std::span<const Object> pairs, const std::string& field,
                                             std::vector<std::uint32_t>& out) {
  out.resize(pairs.size() + 1);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::string item = field + "[" + std::to_string(i) + "]";
    if (pairs[i].type != msgpack::type::ARRAY || pairs[i].via.array.size != 2) {
      return fail(item, "expected an Eagle bigram [token, next token] like the first entry");
    }
    if (auto e = read_token(pairs[i].via.array.ptr[0], item + "[0]", out[i])) return e;
    if (i + 1 == pairs.size()) {
      if (auto e = read_token(pairs[i].via.array.ptr[1], item + "[1]", out[i + 1])) return e;
    }
  }
  return std::nullopt;
}

std::optional<CodecError> read_tokens(const Object& o, const std::string& field, VllmBlockStored& stored) {
  if (o.type != msgpack::type::ARRAY) return wrong_type(field, "array of token ids", o);
  const auto items = as_array(o);
  if (!items.empty() && items[0].type == msgpack::type::ARRAY) {
    stored.bigram_token_ids = true;
    return read_bigram_tokens(items, field, stored.token_ids);
  }
  stored.token_ids.resize(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (auto e = read_token(items[i], field + "[" + std::to_string(i) + "]", stored.token_ids[i])) return e;
  }
  return std::nullopt;
}

std::optional<CodecError> read_block_size(const Object& o, const std::string& field, std::uint64_t& out) {
  if (o.type != msgpack::type::POSITIVE_INTEGER || o.via.u64 == 0) return fail(field, "expected a positive block size");
  out = o.via.u64;
  return std::nullopt;
}

std::optional<CodecError> read_optional_int(const Object& o, const std::string& field,
                                            std::optional<std::int64_t>& out) {
  if (o.type == msgpack::type::NIL) return std::nullopt;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    out = o.via.i64;
  } else if (o.type == msgpack::type::POSITIVE_INTEGER && o.via.u64 <= std::numeric_limits<std::int64_t>::max()) {
    out = static_cast<std::int64_t>(o.via.u64);
  } else {
    return wrong_type(field, "int or nil", o);
  }
  return std::nullopt;
}

std::optional<CodecError> read_optional_str(const Object& o, const std::string& field,
                                            std::optional<std::string>& out) {
  if (o.type == msgpack::type::NIL) return std::nullopt;
  if (o.type != msgpack::type::STR) return wrong_type(field, "str or nil", o);
  out = std::string(msgpack_str(o));
  return std::nullopt;
}

// The fields of one event in positional order, whichever encoding carried them; nullptr = absent.
struct EventFields {
  std::string_view tag;
  std::vector<const Object*> positional;
};

constexpr std::string_view kStoredFields[] = {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                                              "medium",       "lora_name",         "extra_keys"};
constexpr std::string_view kRemovedFields[] = {"block_hashes", "medium"};

std::span<const std::string_view> field_names(std::string_view tag) {
  if (tag == "BlockStored") return kStoredFields;
  if (tag == "BlockRemoved") return kRemovedFields;
  return {};
}

bool known_tag(std::string_view tag) {
  return tag == "BlockStored" || tag == "BlockRemoved" || tag == "AllBlocksCleared";
}

Decoded<EventFields> event_fields(const Object& o, const std::string& field) {
  EventFields out;
  if (o.type == msgpack::type::ARRAY) {
    const auto items = as_array(o);
    if (items.empty() || items[0].type != msgpack::type::STR)
      return fail(field + "[0]", "expected the event tag (str)");
    out.tag = msgpack_str(items[0]);
    if (!known_tag(out.tag)) return fail(field + "[0]", "unknown event tag '" + untrusted_excerpt(out.tag) + "'");
    const std::size_t wanted = field_names(out.tag).size();
    out.positional.assign(wanted, nullptr);
    for (std::size_t i = 0; i < wanted && i + 1 < items.size(); ++i) out.positional[i] = &items[i + 1];
    return out;
  }
  if (o.type == msgpack::type::MAP) {
    const Object* tag = nullptr;
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR && msgpack_str(kv.key) == "type") tag = &kv.val;
    }
    if (tag == nullptr || tag->type != msgpack::type::STR) return fail(field + ".type", "expected the event tag (str)");
    out.tag = msgpack_str(*tag);
    if (!known_tag(out.tag)) return fail(field + ".type", "unknown event tag '" + untrusted_excerpt(out.tag) + "'");
    const auto names = field_names(out.tag);
    out.positional.assign(names.size(), nullptr);
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) continue;
      for (std::size_t f = 0; f < names.size(); ++f) {
        if (msgpack_str(kv.key) == names[f]) out.positional[f] = &kv.val;
      }
    }
    return out;
  }
  return wrong_type(field, "tagged array or tagged map event", o);
}

Decoded<VllmEvent> decode_event(const Object& o, const std::string& field) {
  auto fields = event_fields(o, field);
  if (!fields) return fields.error();
  const EventFields& f = fields.value();
  const bool positional = o.type == msgpack::type::ARRAY;
  auto name = [&](std::size_t i) {
    return positional ? field + "[" + std::to_string(i + 1) + "]" : field + "." + std::string(field_names(f.tag)[i]);
  };
  auto missing = [&](std::size_t i) { return fail(name(i), "required field missing"); };

  if (f.tag == "AllBlocksCleared") return VllmEvent{VllmAllBlocksCleared{}};
  if (f.tag == "BlockRemoved") {
    VllmBlockRemoved removed;
    if (f.positional[0] == nullptr) return missing(0);
    if (auto e = read_hashes(*f.positional[0], name(0), removed.block_hashes)) return *e;
    if (f.positional[1] != nullptr) {
      if (auto e = read_optional_str(*f.positional[1], name(1), removed.medium)) return *e;
    }
    return VllmEvent{std::move(removed)};
  }
  VllmBlockStored stored;
  for (std::size_t i = 0; i < 4; ++i) {
    // NOTE: parent_block_hash (1) is required positionally but may be nil; in a map it may be absent.
    if (f.positional[i] == nullptr && !(i == 1 && !positional)) return missing(i);
  }
  if (auto e = read_hashes(*f.positional[0], name(0), stored.block_hashes)) return *e;
  if (f.positional[1] != nullptr) {
    if (auto e = read_optional_hash(*f.positional[1], name(1), stored.parent_block_hash)) return *e;
  }
  if (auto e = read_tokens(*f.positional[2], name(2), stored)) return *e;
  if (auto e = read_block_size(*f.positional[3], name(3), stored.block_size)) return *e;
  if (f.positional[4] != nullptr) {
    if (auto e = read_optional_int(*f.positional[4], name(4), stored.lora_id)) return *e;
  }
  if (f.positional[5] != nullptr) {
    if (auto e = read_optional_str(*f.positional[5], name(5), stored.medium)) return *e;
  }
  if (f.positional[6] != nullptr) {
    if (auto e = read_optional_str(*f.positional[6], name(6), stored.lora_name)) return *e;
  }
  if (f.positional[7] != nullptr) {
    // NOTE: an unreadable extra_keys is not a decode error: the batch's other events (and this
    // event's blocks before the issue) are still good; the converter counts and truncates.
    BlockExtraKeys extra = read_extra_keys(*f.positional[7], name(7));
    stored.block_mm_hashes = std::move(extra.mm_hashes);
    stored.extra_keys_issue = std::move(extra.issue);
  }
  return VllmEvent{std::move(stored)};
}

std::optional<CodecError> read_ts(const Object& o, double& out) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: out = o.via.f64; return std::nullopt;
    case msgpack::type::POSITIVE_INTEGER: out = static_cast<double>(o.via.u64); return std::nullopt;
    case msgpack::type::NEGATIVE_INTEGER: out = static_cast<double>(o.via.i64); return std::nullopt;
    default: return wrong_type("ts", "float", o);
  }
}

std::optional<CodecError> read_rank(const Object& o, std::optional<DpRank>& out) {
  if (o.type == msgpack::type::NIL) return std::nullopt;
  if (o.type != msgpack::type::POSITIVE_INTEGER || o.via.u64 > std::numeric_limits<DpRank>::max()) {
    return fail("data_parallel_rank", "expected a rank in [0, 2^32) or nil");
  }
  out = static_cast<DpRank>(o.via.u64);
  return std::nullopt;
}

Decoded<VllmEventBatch> decode_batch(const Object& root, const VllmDecodeLimits& limits) {
  VllmEventBatch batch;
  const Object* ts = nullptr;
  const Object* events = nullptr;
  const Object* rank = nullptr;
  if (root.type == msgpack::type::ARRAY) {
    const auto items = as_array(root);
    if (items.size() < 2) return fail("", "batch array needs at least [ts, events]");
    ts = &items[0];
    events = &items[1];
    if (items.size() > 2) rank = &items[2];
  } else if (root.type == msgpack::type::MAP) {
    for (std::uint32_t i = 0; i < root.via.map.size; ++i) {
      const auto& kv = root.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) continue;
      const std::string_view key = msgpack_str(kv.key);
      if (key == "ts")
        ts = &kv.val;
      else if (key == "events")
        events = &kv.val;
      else if (key == "data_parallel_rank" || key == "dp_rank")
        rank = &kv.val;
    }
    if (ts == nullptr) return fail("ts", "required field missing");
    if (events == nullptr) return fail("events", "required field missing");
  } else {
    return wrong_type("", "batch array or map", root);
  }
  if (auto e = read_ts(*ts, batch.ts)) return *e;
  if (rank != nullptr) {
    if (auto e = read_rank(*rank, batch.data_parallel_rank)) return *e;
  }
  if (events->type != msgpack::type::ARRAY) return wrong_type("events", "array", *events);
  const auto items = as_array(*events);
  if (items.size() > limits.max_events_per_batch) return fail("events", "too many events in one batch");
  batch.events.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto event = decode_event(items[i], "events[" + std::to_string(i) + "]");
    if (!event) return event.error();
    batch.events.push_back(std::move(event).value());
  }
  return batch;
}

}  // namespace

std::uint64_t block_hash_from_bytes(std::span<const std::byte> bytes) {
  const std::size_t start = bytes.size() > 8 ? bytes.size() - 8 : 0;
  std::uint64_t value = 0;
  for (std::size_t i = start; i < bytes.size(); ++i) value = (value << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  return value;
}

Decoded<VllmEventBatch> decode_vllm_event_batch(std::span<const std::byte> payload, const VllmDecodeLimits& limits) {
  if (payload.size() > limits.max_payload_bytes) return fail("", "payload larger than the limit");
  if (payload.empty()) return fail("", "empty payload");
  const msgpack::unpack_limit unpack_limits(limits.max_array_length, limits.max_array_length, limits.max_payload_bytes,
                                            limits.max_payload_bytes, limits.max_payload_bytes, limits.max_depth);
  try {
    std::size_t offset = 0;
    // NOTE: without a reference function msgpack-cxx copies str/bin into the handle's zone, so the
    // object tree is self-contained; the limits are checked by the parser before it allocates.
    msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(payload.data()), payload.size(),
                                                    offset, nullptr, nullptr, unpack_limits);
    if (offset != payload.size()) return fail("", "trailing bytes after the batch");
    return decode_batch(handle.get(), limits);
  } catch (const std::exception& e) {
    return fail("", std::string("msgpack: ") + e.what());
  }
}

}  // namespace kvidx::bridge
