// vLLM BlockStored.extra_keys -> the multimodal hashes of each block, for the local block hash
// (libindexer/hashing.h BlockHashOptions::block_mm_hashes).
//
// extra_keys is one entry per block (aligned with block_hashes; missing trailing entries mean
// "none"). An entry is nil (nothing extra) or an array of keys; vLLM mixes multimodal identifiers
// with the LoRA name, the cache salt and prompt-embedding hashes there. A key is read as:
//  - str: a multimodal identifier when it is 64 hex digits (vLLM's digest); any other string is a
//    LoRA name or cache salt, which the block hash already covers through the seed: ignored.
//  - [identifier str, start offset int] (vLLM >= 0.19): always multimodal. The identifier may carry
//    a "<prefix>:" (LoRA-scoped identifiers); the part after the last ':' must be 64 hex digits.
//  - map {"type": "MultiModalKey", "hash": str, ...} (typed extra keys): multimodal, as above.
//    Maps typed LoRAKey, CacheSaltKey, PromptEmbedsKey or LegacyExtraKey are ignored.
//  - bin (prompt-embedding hash), int, float, bool: not multimodal, ignored.
// The mm hash of an identifier is its first 16 hex digits read as a big-endian u64 (Dynamo's rule,
// so kvidx and a Dynamo router hash the same image the same way).
// Anything else (an entry that is neither nil nor an array, a multimodal key whose identifier is
// not a digest, nil or nested keys, unknown maps, extra_keys itself not an array) is an issue: the
// first one is recorded with the block it is in and why, decoding goes on, and the converter keeps
// only the blocks before it (a block hashed without its images could match a text-only prompt).
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bridge/extra_keys_issue.h"

namespace kvidx::bridge {

// The bytes of a msgpack STR object (the caller has checked its type).
inline std::string_view msgpack_str(const msgpack::object& o) { return {o.via.str.ptr, o.via.str.size}; }

// What extra_keys says about a BlockStored's blocks: mm hashes per block (only for the blocks
// before the issue, when there is one) and the first issue.
struct BlockExtraKeys {
  std::vector<std::vector<std::uint64_t>> mm_hashes;  // per block; empty: no multimodal content
  std::optional<ExtraKeysIssue> issue;
};

// Reads an extra_keys value (nil or array); `field` prefixes the reasons.
BlockExtraKeys read_extra_keys(const msgpack::object& extra_keys, const std::string& field);

// 64 hex digits -> the first 16 as a big-endian u64; nullopt otherwise.
std::optional<std::uint64_t> mm_hash_from_identifier(std::string_view identifier);

}  // namespace kvidx::bridge
