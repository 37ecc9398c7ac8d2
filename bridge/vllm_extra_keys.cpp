#include "bridge/vllm_extra_keys.h"

#include <cctype>
#include <utility>

namespace kvidx::bridge {
namespace {

using Object = msgpack::object;

bool is_int(const Object& o) {
  return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER;
}

// What one key of a block contributes.
enum class KeyKind : std::uint8_t { not_multimodal, multimodal, unknown };

struct KeyReading {
  KeyKind kind = KeyKind::not_multimodal;
  std::uint64_t mm_hash = 0;
  std::string problem;  // for unknown
};

KeyReading unknown(std::string problem) { return {KeyKind::unknown, 0, std::move(problem)}; }

// A key known to be multimodal: its identifier must yield a hash.
KeyReading multimodal(std::string_view identifier) {
  const auto colon = identifier.rfind(':');
  const std::string_view digest = colon == std::string_view::npos ? identifier : identifier.substr(colon + 1);
  if (auto hash = mm_hash_from_identifier(digest)) return {KeyKind::multimodal, *hash, {}};
  return unknown("multimodal identifier '" + std::string(identifier.substr(0, 80)) + "' is not a 64-hex-digit digest");
}

const Object* map_value(const Object& map, std::string_view key) {
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && msgpack_str(kv.key) == key) return &kv.val;
  }
  return nullptr;
}

KeyReading read_key(const Object& key) {
  switch (key.type) {
    case msgpack::type::STR: {
      if (auto hash = mm_hash_from_identifier(msgpack_str(key))) return {KeyKind::multimodal, *hash, {}};
      return {};  // LoRA name or cache salt: already in the seed
    }
    case msgpack::type::ARRAY: {
      const Object* items = key.via.array.ptr;
      if (key.via.array.size == 2 && items[0].type == msgpack::type::STR && is_int(items[1])) {
        return multimodal(msgpack_str(items[0]));
      }
      return unknown("expected [identifier, offset], got an array of " + std::to_string(key.via.array.size));
    }
    case msgpack::type::MAP: {
      const Object* type = map_value(key, "type");
      const std::string_view tag = type != nullptr && type->type == msgpack::type::STR ? msgpack_str(*type) : "";
      if (tag == "MultiModalKey") {
        const Object* hash = map_value(key, "hash");
        if (hash == nullptr || hash->type != msgpack::type::STR) return unknown("MultiModalKey without a str hash");
        return multimodal(msgpack_str(*hash));
      }
      if (tag == "LoRAKey" || tag == "CacheSaltKey" || tag == "PromptEmbedsKey" || tag == "LegacyExtraKey") return {};
      return unknown("unknown typed key '" + std::string(tag.substr(0, 80)) + "'");
    }
    case msgpack::type::BIN:
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
    case msgpack::type::BOOLEAN: return {};
    default: return unknown("unexpected key type");
  }
}

}  // namespace

std::optional<std::uint64_t> mm_hash_from_identifier(std::string_view identifier) {
  if (identifier.size() != 64) return std::nullopt;
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < identifier.size(); ++i) {
    const char c = identifier[i];
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    if (i < 16) {
      const int digit = c <= '9' ? c - '0' : (std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
      value = (value << 4) | static_cast<std::uint64_t>(digit);
    }
  }
  return value;
}

BlockExtraKeys read_extra_keys(const msgpack::object& extra_keys, const std::string& field) {
  BlockExtraKeys out;
  if (extra_keys.type == msgpack::type::NIL) return out;
  if (extra_keys.type != msgpack::type::ARRAY) {
    out.issue = ExtraKeysIssue{0, field + ": expected an array of per-block keys or nil"};
    return out;
  }
  const std::uint32_t blocks = extra_keys.via.array.size;
  out.mm_hashes.resize(blocks);
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const Object& entry = extra_keys.via.array.ptr[b];
    const std::string entry_field = field + "[" + std::to_string(b) + "]";
    if (entry.type == msgpack::type::NIL) continue;
    if (entry.type != msgpack::type::ARRAY) {
      out.issue = ExtraKeysIssue{b, entry_field + ": expected an array of keys or nil"};
      break;
    }
    for (std::uint32_t k = 0; k < entry.via.array.size; ++k) {
      const KeyReading key = read_key(entry.via.array.ptr[k]);
      if (key.kind == KeyKind::unknown) {
        out.issue = ExtraKeysIssue{b, entry_field + "[" + std::to_string(k) + "]: " + key.problem};
        break;
      }
      if (key.kind == KeyKind::multimodal) out.mm_hashes[b].push_back(key.mm_hash);
    }
    if (out.issue) break;
  }
  // Blocks from the issue on are not hashable: only the ones before it keep an entry.
  if (out.issue) out.mm_hashes.resize(out.issue->block);
  return out;
}

}  // namespace kvidx::bridge
