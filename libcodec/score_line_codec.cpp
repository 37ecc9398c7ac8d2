#include "libcodec/score_line_codec.h"

#include <fmt/format.h>

#include <algorithm>

#include "libcodec/event_codec.h"
#include "libcodec/json_reader.h"

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

}  // namespace kvidx
