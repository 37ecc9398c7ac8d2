// The gather half of a sharded score query: the replies of N shards (`kvidx serve --shard I/N`),
// each scoring only its own workers, merged into the reply one unsharded index gives. Every field
// is per (worker, rank) except frequencies, and shards hold disjoint workers, so:
//   scores, tree_sizes, active_blocks, each tier of tier_scores: the union, sorted by (worker, rank);
//   frequencies[d] (streams whose match reaches past depth d): the element-wise sum, as long as the
//     longest (an unsharded index's is as long as its highest score, the highest of the shards');
//   tier_scores: a tier is present when some shard has it (an unsharded reply lists a tier that
//     scored anywhere); active_blocks likewise;
//   combined_scores: present when some shard has them (the unsharded reply has them for every
//     stream as soon as any lower tier scored anywhere). A shard without them had no lower-tier
//     score and device weight 1 (else it would have them), so its streams' combined score is their
//     device score (libindexer/tier_scores.cpp: 1.0 x score, exact in a double).
// A stream in two replies means the shards overlap (the server's mapping and --shard disagree):
// an error, not a merge. Queries with early_exit stop per shard, so only those without it are
// exactly the unsharded answer (README "Shards").
#pragma once

#include <string>
#include <vector>

#include "libcodec/query_codec.h"
#include "libindexer/result.h"

namespace kvidx {

Result<ScoreReply, std::string> merge_score_replies(const std::vector<ScoreReply>& parts);

}  // namespace kvidx
