#include <doctest/doctest.h>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "libcodec/query_codec.h"
#include "libindexer/hashing.h"

using namespace kvidx;
using nlohmann::json;

TEST_CASE("score request with local hashes decodes u64 values exactly") {
  auto decoded = decode_score_request(R"({"local_hashes":[1, 18446744073709551615, 3]})");
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value().local_hashes == std::vector<LocalBlockHash>{{1}, {18446744073709551615ULL}, {3}});
  auto again = decode_score_request(encode_score_request(decoded.value()));
  REQUIRE(again.ok());
  CHECK(again.value().local_hashes == decoded.value().local_hashes);
}

TEST_CASE("score request with token ids hashes full blocks like the spec vectors") {
  std::vector<std::uint32_t> tokens;
  for (std::uint32_t t = 1; t <= 35; ++t) tokens.push_back(t);  // 2 full blocks of 16 + 3 dropped
  auto decoded = decode_score_request(encode_token_score_request(tokens, 16));
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value().local_hashes ==
        std::vector<LocalBlockHash>{{16863443419780771464ULL}, {2287610619914608821ULL}});
}

TEST_CASE("score request early_exit flag is optional and round-trips") {
  auto decoded = decode_score_request(R"({"local_hashes":[5],"early_exit":true})");
  REQUIRE(decoded.ok());
  CHECK(decoded.value().early_exit);
  auto again = decode_score_request(encode_score_request(decoded.value()));
  REQUIRE(again.ok());
  CHECK(again.value().early_exit);
  CHECK_FALSE(decode_score_request(R"({"local_hashes":[5]})").value().early_exit);
}

TEST_CASE("score request lora name changes the block seed") {
  std::vector<std::uint32_t> tokens(16, 7);
  auto plain = decode_score_request(encode_token_score_request(tokens, 16));
  auto lora = decode_score_request(encode_token_score_request(tokens, 16, "adapter-a"));
  REQUIRE(plain.ok());
  REQUIRE(lora.ok());
  CHECK(lora.value().local_hashes == compute_block_hashes(tokens, 16, block_hash_seed("adapter-a")));
  CHECK(lora.value().local_hashes != plain.value().local_hashes);
}

TEST_CASE("bad score requests are rejected with the offending field") {
  struct Case {
    const char* text;
    const char* field;
  };
  const Case cases[] = {
      {R"({"local_hashes":[1,-2]})", "local_hashes[1]"},
      {R"({"local_hashes":"x"})", "local_hashes"},
      {R"({"token_ids":[1,2]})", "block_size"},
      {R"({"token_ids":[1,2],"block_size":0})", "block_size"},
      {R"({"token_ids":[4294967296],"block_size":1})", "token_ids[0]"},
      {R"({"token_ids":[1],"block_size":1,"lora_name":5})", "lora_name"},
      {R"({"local_hashes":[1],"token_ids":[1],"block_size":1})", ""},
      {R"({})", ""},
      {R"({"local_hashes":[1],"early_exit":1})", "early_exit"},
      {R"([1,2])", ""},
      {R"({"local_hashes":[1])", ""},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto decoded = decode_score_request(c.text);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.error().field == c.field);
  }
}

TEST_CASE("score request over the hash limit is rejected") {
  QueryLimits limits;
  limits.max_hashes = 2;
  auto decoded = decode_score_request(R"({"local_hashes":[1,2,3]})", limits);
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.error().field == "local_hashes");
}

TEST_CASE("score reply is sorted by worker and rank and round-trips") {
  OverlapScores scores;
  scores.scores[{9, 1}] = 2;
  scores.scores[{3, 0}] = 5;
  scores.scores[{9, 0}] = 1;
  scores.frequencies = {3, 2, 1};
  scores.tree_sizes[{9, 1}] = 20;
  scores.tree_sizes[{3, 0}] = 50;
  scores.tree_sizes[{9, 0}] = 10;
  ScoreReply reply = make_score_reply(scores);
  REQUIRE(reply.scores.size() == 3);
  CHECK(reply.scores[0] == WorkerScore{{3, 0}, 5});
  CHECK(reply.scores[1] == WorkerScore{{9, 0}, 1});
  CHECK(reply.scores[2] == WorkerScore{{9, 1}, 2});
  CHECK(reply.tree_sizes[2] == WorkerBlocks{{9, 1}, 20});
  const std::string text = encode_score_reply(reply);
  const json doc = json::parse(text);
  CHECK(doc["scores"][0] == json{{"worker_id", 3}, {"dp_rank", 0}, {"score", 5}});
  CHECK(doc["frequencies"] == json::array({3, 2, 1}));
  CHECK_FALSE(doc.contains("active_blocks"));
  auto back = decode_score_reply(text);
  REQUIRE(back.ok());
  CHECK(back.value() == reply);

  reply.active_blocks = std::vector<WorkerBlocks>{{{3, 0}, 7}};
  auto with_active = decode_score_reply(encode_score_reply(reply));
  REQUIRE(with_active.ok());
  CHECK(with_active.value() == reply);
}

TEST_CASE("error reply round-trips and is reported by the score reply decoder") {
  ErrorReply error{"bad_request", "local_hashes[1]: expected an unsigned 64-bit integer"};
  const std::string text = encode_error_reply(error);
  CHECK(json::parse(text) == json{{"error", {{"code", "bad_request"}, {"message", error.message}}}});
  CHECK(decode_error_reply(text) == error);
  CHECK_FALSE(decode_error_reply(R"({"scores":[]})").has_value());
  auto as_reply = decode_score_reply(text);
  REQUIRE_FALSE(as_reply.ok());
  CHECK(as_reply.error().field == "error");
  CHECK(as_reply.error().reason.find("bad_request") == 0);
}

TEST_CASE("error reply with invalid utf8 still encodes valid json") {
  const std::string text = encode_error_reply({"bad_request", std::string("bad \xff byte")});
  CHECK(json::accept(text));
}

TEST_CASE("remove worker request with and without rank") {
  auto all = decode_remove_worker_request(R"({"worker_id":12})");
  REQUIRE(all.ok());
  CHECK(all.value() == RemoveWorkerRequest{12, std::nullopt});
  auto one = decode_remove_worker_request(encode_remove_worker_request({12, 3}));
  REQUIRE(one.ok());
  CHECK(one.value() == RemoveWorkerRequest{12, 3});
  CHECK_FALSE(decode_remove_worker_request(R"({"dp_rank":1})").ok());
  CHECK_FALSE(decode_remove_worker_request(R"({"worker_id":"x"})").ok());
}

TEST_CASE("score_request_eagle_flag_hashes_token_ids_with_eagle_windows") {
  // Block size 2, tokens 1..5: Eagle windows [1,2,3] and [3,4,5] (XXH3 seed 1337, u32 LE bytes).
  const unsigned char first[] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0};
  const unsigned char second[] = {3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0};
  auto eagle = decode_score_request(R"({"token_ids":[1,2,3,4,5],"block_size":2,"eagle":true})");
  REQUIRE(eagle.ok());
  REQUIRE(eagle.value().local_hashes.size() == 2);
  CHECK(eagle.value().local_hashes[0].value == XXH3_64bits_withSeed(first, sizeof(first), 1337));
  CHECK(eagle.value().local_hashes[1].value == XXH3_64bits_withSeed(second, sizeof(second), 1337));
  const std::vector<std::uint32_t> tokens{1, 2, 3, 4, 5};
  auto encoded = decode_score_request(encode_token_score_request(tokens, 2, {}, true));
  REQUIRE(encoded.ok());
  CHECK(encoded.value().local_hashes == eagle.value().local_hashes);
  auto plain = decode_score_request(R"({"token_ids":[1,2,3,4,5],"block_size":2,"eagle":null})");
  REQUIRE(plain.ok());
  CHECK(plain.value().local_hashes == compute_block_hashes(tokens, 2));
  auto bad = decode_score_request(R"({"token_ids":[1,2,3],"block_size":2,"eagle":"yes"})");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().field == "eagle");
}

TEST_CASE("workers reply round-trips and an error reply is not one") {
  const WorkersReply reply{{3, 18446744073709551615ULL}, {{{3, 0}, 10}, {{18446744073709551615ULL, 2}, 1}}};
  const std::string text = encode_workers_reply(reply);
  auto decoded = decode_workers_reply(text);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == reply);
  CHECK(encode_workers_reply(decoded.value()) == text);
  auto bad = decode_workers_reply(R"({"workers":[1],"streams":[{"worker_id":1,"dp_rank":0}]})");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().field == "streams[0].blocks");
  CHECK_FALSE(decode_workers_reply(encode_error_reply({"internal", "x"})).ok());
}

TEST_CASE("ok reply is recognised, nothing else is") {
  CHECK(is_ok_reply(encode_ok_reply()));
  CHECK(is_ok_reply(R"( {"ok": true} )"));
  CHECK_FALSE(is_ok_reply(R"({"ok":false})"));
  CHECK_FALSE(is_ok_reply(R"({"ok":1})"));
  CHECK_FALSE(is_ok_reply(encode_error_reply({"bad_request", "no such worker"})));
  CHECK_FALSE(is_ok_reply("true"));
  CHECK_FALSE(is_ok_reply(""));
}

TEST_CASE("score_reply_with_tiers_round_trips_and_stays_unchanged_without_them") {
  TieredOverlapScores scores;
  scores.device.scores[{3, 0}] = 2;
  scores.device.frequencies = {1, 1};
  scores.device.tree_sizes[{3, 0}] = 2;
  // Device-only and default weights: the reply is byte for byte the device reply.
  CHECK(encode_score_reply(make_score_reply(scores, TierWeights{})) ==
        encode_score_reply(make_score_reply(scores.device)));
  CHECK(json::parse(encode_score_reply(make_score_reply(scores, TierWeights{}))).contains("tier_scores") == false);

  scores.lower[tier_index(StorageTier::host_pinned) - 1][{9, 1}] = 4;
  scores.lower[tier_index(StorageTier::host_pinned) - 1][{3, 0}] = 5;
  scores.lower[tier_index(StorageTier::external) - 1][{9, 0}] = 1;
  const ScoreReply reply = make_score_reply(scores, TierWeights{});
  REQUIRE(reply.tier_scores.size() == 2);
  CHECK(reply.tier_scores[0].tier == StorageTier::host_pinned);
  CHECK(reply.tier_scores[0].scores == std::vector<WorkerScore>{{{3, 0}, 5}, {{9, 1}, 4}});
  CHECK(reply.tier_scores[1].tier == StorageTier::external);
  REQUIRE(reply.combined_scores.has_value());
  CHECK(*reply.combined_scores ==
        std::vector<WorkerCombinedScore>{{{3, 0}, 2 + 3 * 0.75}, {{9, 0}, 0.1}, {{9, 1}, 3.0}});
  const std::string text = encode_score_reply(reply);
  const json doc = json::parse(text);
  // `scores` stay the device tier's.
  CHECK(doc["scores"] == json::array({json{{"worker_id", 3}, {"dp_rank", 0}, {"score", 2}}}));
  CHECK(doc["tier_scores"]["host_pinned"][1] == json{{"worker_id", 9}, {"dp_rank", 1}, {"score", 4}});
  CHECK_FALSE(doc["tier_scores"].contains("disk"));
  CHECK(doc["combined_scores"][0]["score"].get<double>() == doctest::Approx(4.25));
  auto back = decode_score_reply(text);
  REQUIRE(back.ok());
  CHECK(back.value() == reply);

  // A device weight other than 1 always says the combined score.
  TieredOverlapScores device_only;
  device_only.device.scores[{3, 0}] = 2;
  std::string error;
  const auto half = parse_tier_weights("device=0.5", error);
  REQUIRE(half.has_value());
  const ScoreReply halved = make_score_reply(device_only, *half);
  CHECK(halved.tier_scores.empty());
  REQUIRE(halved.combined_scores.has_value());
  CHECK(*halved.combined_scores == std::vector<WorkerCombinedScore>{{{3, 0}, 1.0}});

  auto bad_tier = decode_score_reply(R"({"scores":[],"frequencies":[],"tree_sizes":[],"tier_scores":{"tape":[]}})");
  REQUIRE_FALSE(bad_tier.ok());
  CHECK(bad_tier.error().message() ==
        "tier_scores.tape: unknown tier (expected host_pinned, disk or external; device scores are `scores`)");
  CHECK_FALSE(
      decode_score_reply(
          R"({"scores":[],"frequencies":[],"tree_sizes":[],"combined_scores":[{"worker_id":1,"dp_rank":0,"score":"x"}]})")
          .ok());
}

TEST_CASE("score_reply_decoder_agrees_with_the_schema_on_the_tier_corpus") {
  auto read = [](const char* name) {
    std::ifstream in(std::string(KVIDX_SOURCE_DIR) + "/tests/data/wire/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto valid = decode_score_reply(read("valid/score-query-reply.tiers.json"));
  REQUIRE(valid.ok());
  REQUIRE(valid.value().tier_scores.size() == 1);
  CHECK(valid.value().tier_scores[0].tier == StorageTier::host_pinned);
  REQUIRE(valid.value().combined_scores.has_value());
  CHECK(valid.value().combined_scores->at(0).score == 3.5);
  CHECK_FALSE(decode_score_reply(read("invalid/score-query-reply.device-in-tier-scores.json")).ok());
}
