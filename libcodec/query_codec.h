// JSON of kvidx's request/reply API (kv.query.scores, kv.admin.*), errors as values like
// event_codec. nlohmann/json stays inside the .cpp. Shapes are fixed in schemas/.
//
// Score request:  {"local_hashes":[u64...]}
//             or  {"token_ids":[u32...], "block_size":N, "lora_name"?:"...", "eagle"?:bool}  (hashed
//                 with Dynamo's block hashing, libindexer/hashing.h; a trailing partial block is
//                 dropped; "eagle": windows of block_size + 1 tokens with stride block_size)
// Score reply:    {"scores":[{"worker_id","dp_rank","score"}...]   sorted by (worker_id, dp_rank)
//                  "frequencies":[...],
//                  "tree_sizes":[{"worker_id","dp_rank","blocks"}...],
//                  "tier_scores"?:{"host_pinned"|"disk"|"external":[{"worker_id","dp_rank","score"}...]},
//                  "combined_scores"?:[{"worker_id","dp_rank","score":<number>}...],
//                  "active_blocks"?:[{"worker_id","dp_rank","blocks"}...]}
//                 scores, frequencies and tree_sizes are the device tier's (what Dynamo's router reads).
//                 tier_scores: the lower tiers with a score above zero, only when there is one;
//                 combined_scores (libindexer/tier_scores.h): whenever tier_scores is there or the
//                 device weight is not 1, so without it the combined score of each stream is its score.
// Error reply:    {"error":{"code":"...","message":"..."}}
// Ok reply:       {"ok":true}
// Workers reply:  {"workers":[u64...], "streams":[{"worker_id","dp_rank","blocks"}...]}  (kv.admin.workers)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libcodec/codec_result.h"
#include "libindexer/load/active_load.h"
#include "libindexer/protocol.h"
#include "libindexer/tier_scores.h"

namespace kvidx {

struct QueryLimits {
  std::size_t max_message_bytes = 8u << 20;
  std::size_t max_hashes = 1u << 20;
  std::size_t max_nesting_depth = 8;
};

struct ScoreRequest {
  std::vector<LocalBlockHash> local_hashes;
  bool early_exit = false;  // optional "early_exit": stop at the first depth with a single match
};

struct WorkerScore {
  WorkerWithDpRank worker;
  std::uint32_t score = 0;
  friend bool operator==(const WorkerScore&, const WorkerScore&) = default;
};

struct WorkerCombinedScore {
  WorkerWithDpRank worker;
  double score = 0;
  friend bool operator==(const WorkerCombinedScore&, const WorkerCombinedScore&) = default;
};

struct TierScores {
  StorageTier tier = StorageTier::host_pinned;
  std::vector<WorkerScore> scores;  // sorted by (worker_id, dp_rank), all above zero
  friend bool operator==(const TierScores&, const TierScores&) = default;
};

struct WorkerBlocks {
  WorkerWithDpRank worker;
  std::uint64_t blocks = 0;
  friend bool operator==(const WorkerBlocks&, const WorkerBlocks&) = default;
};

struct ScoreReply {
  std::vector<WorkerScore> scores;  // sorted by (worker_id, dp_rank)
  std::vector<std::size_t> frequencies;
  std::vector<WorkerBlocks> tree_sizes;  // sorted by (worker_id, dp_rank)
  std::optional<std::vector<WorkerBlocks>> active_blocks;
  std::vector<TierScores> tier_scores;  // lower tiers with a score, in tier order; empty: field absent
  std::optional<std::vector<WorkerCombinedScore>> combined_scores;  // sorted by (worker_id, dp_rank)
  friend bool operator==(const ScoreReply&, const ScoreReply&) = default;
};

struct ErrorReply {
  std::string code;  // "bad_request", "internal", "unavailable", ...
  std::string message;
  friend bool operator==(const ErrorReply&, const ErrorReply&) = default;
};

struct RemoveWorkerRequest {
  WorkerId worker_id = 0;
  std::optional<DpRank> dp_rank;  // absent: every rank of the worker
  friend bool operator==(const RemoveWorkerRequest&, const RemoveWorkerRequest&) = default;
};

Decoded<ScoreRequest> decode_score_request(std::string_view json, const QueryLimits& limits = {});
std::string encode_score_request(const ScoreRequest& request);
// For clients sending token ids (the server hashes them).
std::string encode_token_score_request(const std::vector<std::uint32_t>& token_ids, std::uint32_t block_size,
                                       std::string_view lora_name = {}, bool eagle = false, bool early_exit = false);

// The whole score reply, sorted and deterministic, from the indexer's result and the active load
// (active_blocks only when some request is live).
ScoreReply make_score_reply(const OverlapScores& scores, const StreamLoads& loads = {});
// The same with every tier's scores: tier_scores and combined_scores as described at the top.
ScoreReply make_score_reply(const TieredOverlapScores& scores, const TierWeights& weights,
                            const StreamLoads& loads = {});
std::string encode_score_reply(const ScoreReply& reply);
// Decodes a score reply; an error reply becomes a CodecError with field "error" and
// reason "<code>: <message>".
Decoded<ScoreReply> decode_score_reply(std::string_view json, const QueryLimits& limits = {});

std::string encode_error_reply(const ErrorReply& error);
// {"ok":true}: the success reply of worker removal, routing decisions and lifecycle messages.
std::string encode_ok_reply();
// The error of an `{"error":{...}}` document, nullopt for anything else.
std::optional<ErrorReply> decode_error_reply(std::string_view json);
// True for exactly the ok reply (an object whose "ok" is true).
bool is_ok_reply(std::string_view json);

struct WorkersReply {
  std::vector<WorkerId> workers;
  std::vector<WorkerBlocks> streams;
  friend bool operator==(const WorkersReply&, const WorkersReply&) = default;
};
std::string encode_workers_reply(const WorkersReply& reply);
// No size bound of its own: the reply comes from kvidx and can list a million streams.
Decoded<WorkersReply> decode_workers_reply(std::string_view json);

Decoded<RemoveWorkerRequest> decode_remove_worker_request(std::string_view json);
std::string encode_remove_worker_request(const RemoveWorkerRequest& request);

}  // namespace kvidx
