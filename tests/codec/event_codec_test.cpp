#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "libcodec/event_codec.h"
#include "libcodec/mm_extra_info_codec.h"

using namespace kvidx;
using nlohmann::json;

namespace {

// The literal examples of docs/wire-format.md.
constexpr const char* kSpecFull =
    R"({"worker_id": 7, "storage_tier": "device", "event": {"event_id": 42, "data": {"stored": {"parent_hash": 16740963408272063728, "start_position": 2, "blocks": [{"block_hash": 5417695437591212399, "tokens_hash": 3}]}}, "dp_rank": 1}})";
constexpr const char* kSpecStored =
    R"({"worker_id": 3, "event": {"event_id": 0, "data": {"stored": {"parent_hash": null, "blocks": [{"block_hash": 1, "tokens_hash": 1}, {"block_hash": 16740963408272063728, "tokens_hash": 2}]}}}})";
constexpr const char* kSpecRemoved =
    R"({"worker_id": 3, "event": {"event_id": 1, "data": {"removed": {"block_hashes": [16740963408272063728]}}, "dp_rank": 0}})";
constexpr const char* kSpecCleared = R"({"worker_id": 3, "event": {"event_id": 2, "data": "cleared", "dp_rank": 0}})";

std::string error_of(std::string_view text) {
  auto decoded = decode_router_event(text);
  REQUIRE_FALSE(decoded.ok());
  return decoded.error().message();
}

// Re-encoding must give back the input document, with the default dp_rank made explicit.
void check_round_trip(const char* text) {
  auto decoded = decode_router_event(text);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  json expected = json::parse(text);
  expected["event"]["dp_rank"] = decoded.value().event.dp_rank;
  CHECK(json::parse(encode_router_event(decoded.value())) == expected);
  auto again = decode_router_event(encode_router_event(decoded.value()));
  REQUIRE(again.ok());
  CHECK(again.value() == decoded.value());
}

}  // namespace

TEST_CASE("spec examples decode to the expected RouterEvents") {
  auto full = decode_router_event(kSpecFull);
  REQUIRE(full.ok());
  const RouterEvent& e = full.value();
  CHECK(e.worker_id == 7);
  CHECK(e.storage_tier == StorageTier::device);
  CHECK(e.event.event_id == 42);
  CHECK(e.event.dp_rank == 1);
  const auto& stored = std::get<KvCacheStoreData>(e.event.data);
  CHECK(stored.parent_hash == ExternalSequenceBlockHash{16740963408272063728ULL});
  CHECK(stored.start_position == 2u);
  REQUIRE(stored.blocks.size() == 1);
  CHECK(stored.blocks[0].block_hash.value == 5417695437591212399ULL);
  CHECK(stored.blocks[0].tokens_hash.value == 3);

  auto root_chain = decode_router_event(kSpecStored);
  REQUIRE(root_chain.ok());
  CHECK_FALSE(std::get<KvCacheStoreData>(root_chain.value().event.data).parent_hash.has_value());
  CHECK(root_chain.value().event.dp_rank == 0);

  auto removed = decode_router_event(kSpecRemoved);
  REQUIRE(removed.ok());
  CHECK(std::get<KvCacheRemoveData>(removed.value().event.data).block_hashes ==
        std::vector<ExternalSequenceBlockHash>{{16740963408272063728ULL}});

  auto cleared = decode_router_event(kSpecCleared);
  REQUIRE(cleared.ok());
  CHECK(std::holds_alternative<KvCacheClearData>(cleared.value().event.data));
}

TEST_CASE("spec examples round-trip through encode") {
  for (const char* text : {kSpecFull, kSpecStored, kSpecRemoved, kSpecCleared}) {
    CAPTURE(text);
    check_round_trip(text);
  }
}

TEST_CASE("cleared also accepts the tagged null and empty-object forms") {
  for (const char* data : {R"({"cleared": null})", R"({"cleared": {}})"}) {
    auto decoded =
        decode_router_event(std::string(R"({"worker_id": 1, "event": {"event_id": 5, "data": )") + data + "}}");
    REQUIRE(decoded.ok());
    CHECK(std::holds_alternative<KvCacheClearData>(decoded.value().event.data));
  }
}

TEST_CASE("u64 extremes survive exactly, never through double") {
  const char* text =
      R"({"worker_id": 18446744073709551615, "event": {"event_id": 18446744073709551615, "data": {"removed": {"block_hashes": [18446744073709551615, 9007199254740993]}}}})";
  auto decoded = decode_router_event(text);
  REQUIRE(decoded.ok());
  CHECK(decoded.value().worker_id == 18446744073709551615ULL);
  const auto& hashes = std::get<KvCacheRemoveData>(decoded.value().event.data).block_hashes;
  CHECK(hashes[1].value == 9007199254740993ULL);  // not representable as a double
  CHECK(json::parse(encode_router_event(decoded.value()))["event"]["data"]["removed"]["block_hashes"][1] ==
        9007199254740993ULL);
}

TEST_CASE("unknown fields are ignored and newer envelope fields are accepted") {
  auto decoded = decode_router_event(
      R"({"worker_id": 1, "residency_domain": "x", "state_source": {"a": 1}, "event": {"event_id": 1, "extra": [1], "data": "cleared"}})");
  REQUIRE(decoded.ok());
  CHECK(decoded.value().worker_id == 1);
}

TEST_CASE("mm_extra_info of null on every block decodes as an event without any (the one form of none)") {
  const std::string plain =
      R"({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {"blocks": [{"block_hash": 2, "tokens_hash": 3}, {"block_hash": 4, "tokens_hash": 5}]}}}})";
  const std::string nulls =
      R"({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {"blocks": [{"block_hash": 2, "tokens_hash": 3, "mm_extra_info": null}, {"block_hash": 4, "tokens_hash": 5, "mm_extra_info": null}]}}}})";
  for (const bool dom : {false, true}) {
    auto a = dom ? decode_router_events_dom(plain) : decode_router_events(plain);
    auto b = dom ? decode_router_events_dom(nulls) : decode_router_events(nulls);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(std::get<KvCacheStoreData>(b.value().at(0).event.data).mm_extra_infos.empty());
    CHECK(a.value() == b.value());
  }
}

TEST_CASE("mm_extra_info is carried through encode and decode") {
  auto decoded = decode_router_event(
      R"({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {"blocks": [{"block_hash": 2, "tokens_hash": 3, "mm_extra_info": {"mm_hashes": [9]}}]}}}})");
  REQUIRE(decoded.ok());
  const auto& data = std::get<KvCacheStoreData>(decoded.value().event.data);
  REQUIRE(data.blocks.size() == 1);
  REQUIRE(data.mm_extra_info(0) != nullptr);
  CHECK(json::parse(*data.mm_extra_info(0)) == json::parse(R"({"mm_hashes": [9]})"));
  auto again = decode_router_event(encode_router_event(decoded.value()));
  REQUIRE(again.ok());
  CHECK(again.value() == decoded.value());
}

TEST_CASE("errors name the offending field") {
  CHECK(error_of(R"({"event": {"event_id": 1, "data": "cleared"}})") == "worker_id: missing required field");
  CHECK(error_of(R"({"worker_id": "7", "event": {"event_id": 1, "data": "cleared"}})") ==
        "worker_id: expected an unsigned 64-bit integer, got string");
  CHECK(error_of(R"({"worker_id": -1, "event": {"event_id": 1, "data": "cleared"}})") ==
        "worker_id: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id": 18446744073709551616, "event": {"event_id": 1, "data": "cleared"}})") ==
        "worker_id: expected an unsigned 64-bit integer, got non-integer or out-of-range number");
  CHECK(error_of(R"({"worker_id": 1.5, "event": {"event_id": 1, "data": "cleared"}})") ==
        "worker_id: expected an unsigned 64-bit integer, got non-integer or out-of-range number");
  CHECK(error_of(R"({"worker_id": 1, "event": {"data": "cleared"}})") == "event.event_id: missing required field");
  CHECK(error_of(R"({"worker_id": 1, "event": {"event_id": 1, "data": "cleared", "dp_rank": 4294967296}})") ==
        "event.dp_rank: value 4294967296 does not fit an unsigned 32-bit integer");
  CHECK(error_of(R"({"worker_id": 1, "event": {"event_id": 1, "data": "evicted"}})") ==
        "event.data: unknown variant 'evicted' (expected stored, removed or cleared)");
  CHECK(error_of(R"({"worker_id": 1, "event": {"event_id": 1, "data": {"moved": {}}}})") ==
        "event.data: unknown variant 'moved' (expected stored, removed or cleared)");
  CHECK(
      error_of(R"({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {"blocks": [{"block_hash": 1}]}}}})") ==
      "event.data.stored.blocks[0].tokens_hash: missing required field");
  CHECK(error_of(R"({"worker_id": 1, "event": {"event_id": 1, "data": {"stored": {"blocks": {}}}}})") ==
        "event.data.stored.blocks: expected an array, got object");
  CHECK(error_of(R"({"worker_id": 1, "event": {"event_id": 1, "data": {"removed": {"block_hashes": [1, -2]}}}})") ==
        "event.data.removed.block_hashes[1]: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id": 1, "storage_tier": "tape", "event": {"event_id": 1, "data": "cleared"}})") ==
        "storage_tier: unknown tier 'tape' (expected device, host_pinned, disk or external)");
  CHECK(error_of(R"([1])") == "expected an object, got array");
}

TEST_CASE("syntax errors, trailing garbage, oversize and deep nesting are rejected with a reason") {
  CHECK(error_of(R"({"worker_id": 1,)").rfind("invalid JSON:", 0) == 0);
  CHECK(error_of(R"({"worker_id": 1, "event": {"event_id": 1, "data": "cleared"}} xyz)").rfind("invalid JSON:", 0) ==
        0);
  CHECK(error_of("").rfind("invalid JSON:", 0) == 0);

  DecodeLimits small;
  small.max_message_bytes = 16;
  auto big = decode_router_event(kSpecCleared, small);
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().message().find("exceeds the limit of 16 bytes") != std::string::npos);

  std::string deep(100000, '[');
  CHECK(error_of(deep) == "JSON nesting deeper than 32 levels");

  DecodeLimits few_blocks;
  few_blocks.max_blocks_per_event = 1;
  auto many = decode_router_event(kSpecStored, few_blocks);
  REQUIRE_FALSE(many.ok());
  CHECK(many.error().message() == "event.data.stored.blocks: 2 blocks exceed the limit of 1 per event");
}

TEST_CASE("a batch is an array of events decoded in order, errors carry the index") {
  const std::string batch = std::string("[") + kSpecStored + "," + kSpecRemoved + "," + kSpecCleared + "]";
  auto decoded = decode_router_events(batch);
  REQUIRE(decoded.ok());
  REQUIRE(decoded.value().size() == 3);
  CHECK(decoded.value()[1].event.event_id == 1);
  CHECK(std::holds_alternative<KvCacheClearData>(decoded.value()[2].event.data));
  auto single = decode_router_events(kSpecCleared);
  REQUIRE(single.ok());
  CHECK(single.value().size() == 1);

  auto bad = decode_router_events(std::string("[") + kSpecStored + R"(, {"worker_id": 1}])");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message() == "[1].event: missing required field");

  auto encoded = decode_router_events(encode_router_events(decoded.value()));
  REQUIRE(encoded.ok());
  CHECK(encoded.value() == decoded.value());
}

TEST_CASE("event-log lines accept the bare event and the capture wrapper") {
  auto bare = decode_event_log_line(kSpecRemoved);
  REQUIRE(bare.ok());
  CHECK_FALSE(bare.value().ts.has_value());
  auto wrapped = decode_event_log_line(std::string(R"({"ts": 1733140000.25, "subject": "kv.events.3", "event": )") +
                                       kSpecRemoved + "}");
  REQUIRE(wrapped.ok());
  CHECK(wrapped.value().subject == "kv.events.3");
  CHECK(wrapped.value().ts == doctest::Approx(1733140000.25));
  CHECK(wrapped.value().event == bare.value().event);
  auto again = decode_event_log_line(encode_event_log_line(wrapped.value()));
  REQUIRE(again.ok());
  CHECK(again.value().event == wrapped.value().event);
  CHECK(again.value().subject == wrapped.value().subject);

  auto missing = decode_event_log_line(R"({"ts": 1, "subject": "kv.events.3"})");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message() == "event: missing required field");
}

TEST_CASE("mm_extra_info from the bridge's hashes is the object the event decoder keeps") {
  const std::string info = encode_mm_extra_info({72623859790382856ULL, 1});
  CHECK(info == R"({"mm_objects":[{"mm_hash":72623859790382856,"offsets":[]},{"mm_hash":1,"offsets":[]}]})");
  CHECK(encode_mm_extra_info({}) == R"({"mm_objects":[]})");
}
