#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "libcodec/query_codec.h"
#include "libcodec/stats_codec.h"

using namespace kvidx;
using nlohmann::json;

namespace {

StatsReply sample_reply() {
  StatsReply r;
  r.ready = false;
  r.not_ready_reason = "catching up: acked 5 of 9";
  r.snapshot_stale = true;
  r.snapshot_age_seconds = 12.5;
  r.mode = "jetstream";
  r.queries_rejected_by_reason = {{"bad_json", 2}, {"limit", 1}};
  std::uint64_t n = 1;
  // Every count distinct, so a row wired to the wrong field shows up.
  for (const StatsCounter& counter : kStatsCounters) r.*counter.field = 1000 + n++;
  r.acked_sequence = 18446744073709551615ULL;
  return r;
}

std::vector<std::string> keys_of(const std::string& text) {
  std::vector<std::string> keys;
  const auto doc = nlohmann::ordered_json::parse(text);
  for (const auto& [key, value] : doc.items()) keys.push_back(key);
  return keys;
}

}  // namespace

TEST_CASE("stats reply round-trips every field") {
  const StatsReply reply = sample_reply();
  auto decoded = decode_stats_reply(encode_stats_reply(reply));
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == reply);
  CHECK(decoded.value().acked_sequence == 18446744073709551615ULL);
}

TEST_CASE("stats reply keys are alphabetical, snapshot age is null when snapshots are off") {
  StatsReply reply = sample_reply();
  reply.snapshot_age_seconds.reset();
  const std::string text = encode_stats_reply(reply);
  const json doc = json::parse(text);
  CHECK(doc.at("snapshot_age_seconds").is_null());
  CHECK(doc.at("mode") == "jetstream");
  CHECK(doc.at("queries_rejected_by_reason") == json{{"bad_json", 2}, {"limit", 1}});
  CHECK(doc.at("max_streams") == reply.max_streams);
  // + ready, not_ready_reason, snapshot_stale, snapshot_age_seconds, mode, queries_rejected_by_reason, replica,
  // restored_from, tiers, tier_weights
  CHECK(doc.size() == std::size(kStatsCounters) + 10);
  const auto keys = keys_of(text);
  CHECK(std::is_sorted(keys.begin(), keys.end()));
  auto decoded = decode_stats_reply(text);
  REQUIRE(decoded.ok());
  CHECK_FALSE(decoded.value().snapshot_age_seconds.has_value());
}

TEST_CASE("stats reply decoding names the missing or mistyped field") {
  json doc = json::parse(encode_stats_reply(sample_reply()));
  doc.erase("stream_holes");
  auto missing = decode_stats_reply(doc.dump());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().kind == CodecErrorKind::missing_field);
  CHECK(missing.error().message().find("stream_holes") != std::string::npos);

  doc = json::parse(encode_stats_reply(sample_reply()));
  doc["ready"] = "yes";
  auto mistyped = decode_stats_reply(doc.dump());
  REQUIRE_FALSE(mistyped.ok());
  CHECK(mistyped.error().kind == CodecErrorKind::wrong_type);
  CHECK(mistyped.error().field == "ready");

  doc = json::parse(encode_stats_reply(sample_reply()));
  doc["queries_rejected_by_reason"]["limit"] = -1;
  auto negative = decode_stats_reply(doc.dump());
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.error().field == "queries_rejected_by_reason.limit");

  // An error reply is not a stats reply (the CLI then prints it as the service's answer).
  const std::string error = encode_error_reply({"internal", "boom"});
  CHECK_FALSE(decode_stats_reply(error).ok());
  CHECK(decode_error_reply(error).has_value());
  CHECK_FALSE(decode_stats_reply("not json").ok());
}

TEST_CASE("live stats print the reply's keys, then the dump's tree shape") {
  const StatsReply reply = sample_reply();
  const std::string text = encode_live_stats(reply, TreeShape{7, "dump", {{1, 3}, {4, 1}}});
  const auto keys = keys_of(text);
  REQUIRE(keys.size() == std::size(kStatsCounters) + 10 + 3);
  CHECK(std::is_sorted(keys.begin(), keys.end() - 3));
  CHECK(std::vector<std::string>(keys.end() - 3, keys.end()) ==
        std::vector<std::string>{"distinct_blocks", "edge_lengths_from", "edge_length_histogram"});
  const json doc = json::parse(text);
  CHECK(doc.at("distinct_blocks") == 7);
  CHECK(doc.at("edge_lengths_from") == "dump");
  CHECK(doc.at("edge_length_histogram") == json{{"1", 3}, {"4", 1}});
  CHECK(doc.at("blocks") == reply.blocks);
}

TEST_CASE("offline stats keep their key order") {
  OfflineStats stats;
  stats.workers = 2;
  stats.streams = 3;
  stats.blocks = 10;
  stats.nodes = 4;
  stats.shape = TreeShape{6, "tree", {{2, 3}}};
  stats.events_by_type = {{"stored", 5}, {"removed", 1}, {"cleared", 0}};
  stats.events_by_result = {{"ok", 6}};
  stats.gaps = 1;
  stats.bad_lines = 2;
  const std::string text = encode_offline_stats(stats);
  CHECK(keys_of(text) == std::vector<std::string>{"workers", "streams", "blocks", "distinct_blocks", "nodes", "tiers",
                                                  "edge_lengths_from", "edge_length_histogram", "events_by_type",
                                                  "events_by_result", "duplicates", "gaps", "missing_events", "resets",
                                                  "bad_lines"});
  const auto doc = nlohmann::ordered_json::parse(text);
  CHECK(doc.at("events_by_type").dump() == R"({"stored":5,"removed":1,"cleared":0})");
  CHECK(doc.at("edge_length_histogram").dump() == R"({"2":3})");
  CHECK(doc.at("gaps") == 1);
  CHECK(doc.at("bad_lines") == 2);
}

TEST_CASE("stats reply carries the index digest when asked, and the request says how much") {
  CHECK(decode_stats_request("{}") == DigestDetail::none);
  CHECK(decode_stats_request("not json") == DigestDetail::none);
  CHECK(decode_stats_request(R"({"digest":"total"})") == DigestDetail::total);
  CHECK(decode_stats_request(R"({"digest":"streams"})") == DigestDetail::streams);
  CHECK(decode_stats_request(R"({"digest":true})") == DigestDetail::streams);
  CHECK(decode_stats_request(R"({"digest":"everything"})") == DigestDetail::none);

  StatsReply reply = sample_reply();
  reply.replica = "kvidx-a";
  reply.restored_from = "kvidx-b";
  reply.digest = StatsDigest{{}, 42, "00000000deadbeef", 7, 1, std::vector{StreamDigestLine{3, 1, "device", 7, "1"}}};
  const std::string text = encode_stats_reply(reply);
  const json doc = json::parse(text);
  CHECK(doc.at("digest").at("position") == 42);
  CHECK(doc.at("digest").at("by_stream").at(0).at("tier") == "device");
  auto decoded = decode_stats_reply(text);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == reply);

  reply.digest = StatsDigest{"indexer offline", std::nullopt, {}, 0, 0, std::nullopt};
  CHECK(json::parse(encode_stats_reply(reply)).at("digest") == json{{"error", "indexer offline"}});
  decoded = decode_stats_reply(encode_stats_reply(reply));
  REQUIRE(decoded.ok());
  CHECK(decoded.value() == reply);
}

TEST_CASE("replicas summary agrees only when every replica is at one position with one total") {
  auto replica = [](std::string name, std::uint64_t position, std::string total) {
    StatsReply r = sample_reply();
    r.replica = std::move(name);
    r.digest = StatsDigest{{}, position, std::move(total), 5, 1, std::nullopt};
    return r;
  };
  json out = json::parse(encode_replicas_summary({replica("b", 9, "aa"), replica("a", 9, "aa")}));
  CHECK(out.at("replicas") == 2);
  CHECK(out.at("same_position") == true);
  CHECK(out.at("agree") == true);
  CHECK(out.at("by_replica").at(0).at("replica") == "a");
  out = json::parse(encode_replicas_summary({replica("a", 9, "aa"), replica("b", 9, "ab")}));
  CHECK(out.at("agree") == false);
  out = json::parse(encode_replicas_summary({replica("a", 9, "aa"), replica("b", 10, "aa")}));
  CHECK(out.at("same_position") == false);
  CHECK(out.at("agree").is_null());
}
