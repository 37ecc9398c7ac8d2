// The query and score lines of `kvidx replay` (--queries FILE, --scores-out FILE): a query line is {"id": <any JSON>,
// "local_hashes": [u64...]}; its answer is {"id": <same>, "scores": [{"worker_id", "dp_rank", "score"}...]} with only
// scores > 0, sorted by (worker_id, dp_rank). Scores are the device tier's; when a lower tier scored, "tier_scores"
// and "combined_scores" follow, as in the live reply (libcodec/query_codec.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "libcodec/codec_result.h"
#include "libindexer/protocol.h"
#include "libindexer/tier_scores.h"

namespace kvidx {

struct ScoreQueryLine {
  std::string id_json = "null";  // the id exactly as given (re-emitted verbatim)
  std::vector<LocalBlockHash> local_hashes;
};

Decoded<ScoreQueryLine> decode_score_query_line(std::string_view line);
std::string encode_score_line(const ScoreQueryLine& query, const OverlapScores& scores);
std::string encode_score_line(const ScoreQueryLine& query, const TieredOverlapScores& scores,
                              const TierWeights& weights);

}  // namespace kvidx
