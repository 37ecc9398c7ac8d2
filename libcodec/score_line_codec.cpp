#include "libcodec/score_line_codec.h"

#include <fmt/format.h>

#include <algorithm>

#include "libcodec/event_codec.h"
#include "libcodec/json_reader.h"
#include "libcodec/query_codec.h"

namespace kvidx {

Decoded<ScoreQueryLine> decode_score_query_line(std::string_view line) {
  using namespace json_reader;
  // NOTE: the codec's document rules (size, nesting, trailing bytes, bounded reasons) apply here too.
  const DecodeLimits limits;
  return guarded([&] {
    const Json doc = parse_document(line, limits.max_message_bytes, limits.max_nesting_depth);
    require_object(doc, "");
    ScoreQueryLine query;
    if (const Json* id = find(doc, "id"); id != nullptr) query.id_json = id->dump();
    const Json& hashes = require(doc, "local_hashes", "");
    if (!hashes.is_array())
      fail(Kind::wrong_type, "local_hashes", fmt::format("expected an array, got {}", type_name(hashes)));
    query.local_hashes.reserve(hashes.size());
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      query.local_hashes.push_back(LocalBlockHash{read_u64(hashes[i], join("local_hashes", i))});
    }
    return query;
  });
}

std::string encode_score_line(const ScoreQueryLine& query, const OverlapScores& scores) {
  std::vector<std::pair<WorkerWithDpRank, std::uint32_t>> sorted;
  sorted.reserve(scores.scores.size());
  for (const auto& [stream, score] : scores.scores) {
    if (score > 0) sorted.emplace_back(stream, score);
  }
  std::sort(sorted.begin(), sorted.end());
  std::string out = fmt::format(R"({{"id":{},"scores":[)", query.id_json);
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0) out += ',';
    out += fmt::format(R"({{"worker_id":{},"dp_rank":{},"score":{}}})", sorted[i].first.worker_id,
                       sorted[i].first.dp_rank, sorted[i].second);
  }
  out += "]}";
  return out;
}

namespace {

void append_scores(std::string& out, const std::vector<WorkerScore>& scores) {
  out += '[';
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (i > 0) out += ',';
    out += fmt::format(R"({{"worker_id":{},"dp_rank":{},"score":{}}})", scores[i].worker.worker_id,
                       scores[i].worker.dp_rank, scores[i].score);
  }
  out += ']';
}

}  // namespace

std::string encode_score_line(const ScoreQueryLine& query, const TieredOverlapScores& scores,
                              const TierWeights& weights) {
  std::string out = encode_score_line(query, scores.device);
  // The same fields and rules as the live reply (make_score_reply), appended after "scores".
  const ScoreReply reply = make_score_reply(scores, weights);
  if (reply.tier_scores.empty() && !reply.combined_scores) return out;
  out.pop_back();  // the closing brace
  if (!reply.tier_scores.empty()) {
    out += R"(,"tier_scores":{)";
    for (std::size_t i = 0; i < reply.tier_scores.size(); ++i) {
      if (i > 0) out += ',';
      out += fmt::format(R"("{}":)", to_string(reply.tier_scores[i].tier));
      append_scores(out, reply.tier_scores[i].scores);
    }
    out += '}';
  }
  if (reply.combined_scores) {
    out += R"(,"combined_scores":[)";
    for (std::size_t i = 0; i < reply.combined_scores->size(); ++i) {
      const auto& c = (*reply.combined_scores)[i];
      if (i > 0) out += ',';
      out +=
          fmt::format(R"({{"worker_id":{},"dp_rank":{},"score":{}}})", c.worker.worker_id, c.worker.dp_rank, c.score);
    }
    out += ']';
  }
  out += '}';
  return out;
}

}  // namespace kvidx
