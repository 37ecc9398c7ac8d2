#include <doctest/doctest.h>

#include <string>

#include "libcodec/score_line_codec.h"

using namespace kvidx;

TEST_CASE("replay query line keeps its id verbatim and reads the hashes") {
  auto query = decode_score_query_line(R"({"id":{"req":"a-1","n":[1,2]},"local_hashes":[5,18446744073709551615]})");
  REQUIRE_MESSAGE(query.ok(), query.error().message());
  CHECK(query.value().id_json == R"({"n":[1,2],"req":"a-1"})");
  CHECK(query.value().local_hashes == std::vector<LocalBlockHash>{{5}, {18446744073709551615ULL}});
  auto no_id = decode_score_query_line(R"({"local_hashes":[]})");
  REQUIRE(no_id.ok());
  CHECK(no_id.value().id_json == "null");
  auto bad = decode_score_query_line(R"({"id":1,"local_hashes":[1,-2]})");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().field == "local_hashes[1]");
  CHECK_FALSE(decode_score_query_line(R"({"id":1})").ok());
}

TEST_CASE("replay score line lists the positive scores sorted by worker and rank") {
  ScoreQueryLine query;
  query.id_json = R"("q7")";
  OverlapScores scores;
  scores.scores[WorkerWithDpRank{9, 0}] = 2;
  scores.scores[WorkerWithDpRank{3, 1}] = 4;
  scores.scores[WorkerWithDpRank{3, 0}] = 0;  // no overlap: left out
  CHECK(encode_score_line(query, scores) ==
        R"({"id":"q7","scores":[{"worker_id":3,"dp_rank":1,"score":4},{"worker_id":9,"dp_rank":0,"score":2}]})");
  CHECK(encode_score_line(query, OverlapScores{}) == R"({"id":"q7","scores":[]})");
}
