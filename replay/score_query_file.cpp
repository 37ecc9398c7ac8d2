#include "replay/score_query_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvidx {

Decoded<ScoreQueryLine> decode_score_query_line(std::string_view line) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    return CodecError{"", "invalid JSON: " + what};
  }
  if (!doc.is_object()) return CodecError{"", "expected an object"};
  ScoreQueryLine query;
  if (auto id = doc.find("id"); id != doc.end()) query.id_json = id->dump();
  auto hashes = doc.find("local_hashes");
  if (hashes == doc.end()) return CodecError{"local_hashes", "missing required field"};
  if (!hashes->is_array()) return CodecError{"local_hashes", "expected an array"};
  query.local_hashes.reserve(hashes->size());
  for (std::size_t i = 0; i < hashes->size(); ++i) {
    const auto& value = (*hashes)[i];
    if (!value.is_number_unsigned()) {
      return CodecError{fmt::format("local_hashes[{}]", i), "expected an unsigned 64-bit integer"};
    }
    query.local_hashes.push_back(LocalBlockHash{value.get<std::uint64_t>()});
  }
  return query;
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
