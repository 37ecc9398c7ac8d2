#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "libcodec/snapshot_codec.h"

using namespace kvidx;
using nlohmann::json;

TEST_CASE("snapshot commit round-trips, watermarks inline") {
  const SnapshotCommit commit{"1700000000000-42",
                              99,
                              5,
                              9,
                              5,
                              1234,
                              {{{7, 0}, 18446744073709551615ULL}, {{7, 3}, 12}, {{8, 4294967295U}, 0}},
                              0,
                              "",
                              ""};
  const std::string text = encode_snapshot_commit(commit);
  // The stored shape: snapshots written by earlier builds are read back with the same decoder.
  CHECK(json::parse(text) == json::parse(R"({"id":"1700000000000-42","stream_sequence":99,"first_chunk":5,
      "last_chunk":9,"chunks":5,"events":1234,"watermarks":[[7,0,18446744073709551615],[7,3,12],[8,4294967295,0]]})"));
  auto decoded = decode_snapshot_commit(text);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == commit);
}

TEST_CASE("snapshot commit with its watermarks in chunks, and watermark lines") {
  const SnapshotCommit commit{"s", 3, 1, 4, 4, 10, {}, 70000, "", ""};
  const std::string text = encode_snapshot_commit(commit);
  CHECK(json::parse(text).at("watermarks_in_chunks") == 70000);
  CHECK(json::parse(text).at("watermarks") == json::array());
  auto decoded = decode_snapshot_commit(text);
  REQUIRE(decoded.ok());
  CHECK(decoded.value() == commit);

  const StreamWatermark mark{{12, 1}, 77};
  CHECK(encode_watermark_line(mark) == "[12,1,77]");
  auto line = decode_watermark_line("[12,1,77]");
  REQUIRE(line.ok());
  CHECK(line.value() == mark);
}

TEST_CASE("snapshot records that are not well formed are rejected with the field") {
  auto no_events =
      decode_snapshot_commit(R"({"id":"s","stream_sequence":1,"first_chunk":0,"last_chunk":0,"watermarks":[]})");
  REQUIRE_FALSE(no_events.ok());
  CHECK(no_events.error().kind == CodecErrorKind::missing_field);
  CHECK(no_events.error().message().find("events") != std::string::npos);

  auto bad_mark = decode_snapshot_commit(
      R"({"id":"s","stream_sequence":1,"first_chunk":0,"last_chunk":0,"events":0,"watermarks":[[1,2]]})");
  REQUIRE_FALSE(bad_mark.ok());
  CHECK(bad_mark.error().field == "watermarks[0]");

  auto rank_too_large = decode_watermark_line("[1,4294967296,3]");
  REQUIRE_FALSE(rank_too_large.ok());
  CHECK(rank_too_large.error().field == "[1]");
  CHECK_FALSE(decode_watermark_line("[1,2,-3]").ok());
  CHECK_FALSE(decode_watermark_line("{}").ok());
  CHECK_FALSE(decode_snapshot_commit("[]").ok());
}

TEST_CASE("snapshot commit names its events stream when it has one") {
  SnapshotCommit commit{"s", 3, 1, 4, 4, 10, {{{1, 0}, 5}}, 0, "KV_EVENTS", ""};
  const std::string text = encode_snapshot_commit(commit);
  CHECK(json::parse(text).at("events_stream") == "KV_EVENTS");
  auto decoded = decode_snapshot_commit(text);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == commit);
  commit.events_stream.clear();
  CHECK_FALSE(json::parse(encode_snapshot_commit(commit)).contains("events_stream"));
}

TEST_CASE("snapshot commit names the shard that wrote it, and only a shard's does") {
  SnapshotCommit commit{"s", 3, 1, 4, 4, 10, {{{1, 0}, 5}}, 0, "KV_EVENTS", "1/3"};
  const std::string text = encode_snapshot_commit(commit);
  CHECK(json::parse(text).at("shard") == "1/3");
  auto decoded = decode_snapshot_commit(text);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == commit);
  commit.shard.clear();
  CHECK_FALSE(json::parse(encode_snapshot_commit(commit)).contains("shard"));
}
