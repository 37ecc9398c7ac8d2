// vLLM's KV-event batch as it arrives in the third ZMQ frame (msgpack), decoded into plain types.
// Decoding never throws: a bad payload is a CodecError naming the offending field.
//
// Accepted encodings (vLLM's msgspec structs and the variants seen across versions and forks):
//  - batch: array `[ts, [events...], data_parallel_rank?]` (msgspec array_like) or a map with keys
//    `ts`, `events`, `data_parallel_rank` (alias `dp_rank`); ts may be a float or an integer; the
//    rank may be nil or absent. Extra trailing elements / unknown keys are ignored.
//  - event: tagged array `[tag, field...]` (array_like + tag) or tagged map `{"type": tag, ...}`.
//    Tags: `BlockStored`, `BlockRemoved`, `AllBlocksCleared`; any other tag is an error.
//    BlockStored positions: block_hashes, parent_block_hash, token_ids, block_size, lora_id,
//    medium, lora_name, extra_keys, then anything (group_idx, ...) ignored. The first four are
//    required (parent may be nil); missing trailing ones are absent (msgspec omit_defaults).
//    extra_keys gives each block's multimodal hashes (bridge/vllm_extra_keys.h); a shape it does
//    not know is not a decode error but recorded on the event (extra_keys_issue) for the converter.
//    BlockRemoved positions: block_hashes (required), medium. AllBlocksCleared: no fields.
//  - block hash: positive integer (u64), negative integer (i64, taken as its two's-complement u64,
//    as vLLM wraps hashes >= 2^63 into i64), or bytes (bin): the LAST 8 bytes read big-endian,
//    left-padded with zeros when shorter (Dynamo's rule for vLLM's sha256 byte hashes).
//  - token ids: integers in [0, 2^32), or Eagle bigrams: pairs [t_i, t_i+1] (SGLang with an Eagle
//    draft model), flattened to the first token of every pair plus the second of the last pair
//    (n pairs -> n + 1 tokens, what Eagle's overlapping hash windows need) and flagged
//    bigram_token_ids. A pair that is not two token ids, or a mix of pairs and plain ids, is an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "bridge/extra_keys_issue.h"
#include "libcodec/codec_result.h"
#include "libindexer/protocol.h"

namespace kvidx::bridge {

struct VllmBlockStored {
  std::vector<std::uint64_t> block_hashes;  // external hashes, normalised to u64
  std::optional<std::uint64_t> parent_block_hash;
  std::vector<std::uint32_t> token_ids;
  std::uint64_t block_size = 0;
  std::optional<std::int64_t> lora_id;
  std::optional<std::string> medium;
  std::optional<std::string> lora_name;
  bool bigram_token_ids = false;  // token_ids came as Eagle bigrams (flattened above)
  // Per block, aligned with block_hashes: its multimodal hashes from extra_keys (empty: none).
  // Shorter than block_hashes when extra_keys is absent or shorter.
  std::vector<std::vector<std::uint64_t>> block_mm_hashes;
  std::optional<ExtraKeysIssue> extra_keys_issue;  // blocks from issue->block on cannot be hashed
};

struct VllmBlockRemoved {
  std::vector<std::uint64_t> block_hashes;
  std::optional<std::string> medium;
};

struct VllmAllBlocksCleared {};

using VllmEvent = std::variant<VllmBlockStored, VllmBlockRemoved, VllmAllBlocksCleared>;

struct VllmEventBatch {
  double ts = 0;
  std::vector<VllmEvent> events;
  std::optional<DpRank> data_parallel_rank;
};

// Bounds applied to untrusted payloads (enforced by the msgpack parser before allocation too).
struct VllmDecodeLimits {
  std::size_t max_payload_bytes = 64u << 20;
  std::size_t max_events_per_batch = 1u << 20;
  std::size_t max_array_length = 1u << 24;  // token ids, hashes
  std::size_t max_depth = 16;
};

Decoded<VllmEventBatch> decode_vllm_event_batch(std::span<const std::byte> payload,
                                                const VllmDecodeLimits& limits = {});

// Bytes block hash -> u64: the last 8 bytes big-endian, left-padded with zeros when shorter.
std::uint64_t block_hash_from_bytes(std::span<const std::byte> bytes);

}  // namespace kvidx::bridge
