// The codec's side of routing decisions, request lifecycles, the dump framing and the chunked reply end marker: the
// shapes the service reads and the CLI writes, round trips and rejections with the field that is wrong.
#include <doctest/doctest.h>

#include <string>

#include "libcodec/chunked_reply_codec.h"
#include "libcodec/dump_codec.h"
#include "libcodec/query_codec.h"
#include "libcodec/router_messages_codec.h"

using namespace kvidx;

TEST_CASE("routing decision decodes worker, optional rank and both hash lists, and round-trips") {
  auto plain = decode_routing_decision(R"({"worker_id": 7, "local_hashes": [1, 2, 3]})");
  REQUIRE_MESSAGE(plain.ok(), plain.error().message());
  CHECK(plain.value().stream == WorkerWithDpRank{7, 0});
  CHECK(plain.value().local_hashes == std::vector<LocalBlockHash>{{1}, {2}, {3}});
  CHECK_FALSE(plain.value().sequence_hashes.has_value());

  auto full = decode_routing_decision(R"({"worker_id": 8, "dp_rank": 1, "local_hashes": [1], "sequence_hashes": [9]})");
  REQUIRE_MESSAGE(full.ok(), full.error().message());
  CHECK(full.value().stream == WorkerWithDpRank{8, 1});
  REQUIRE(full.value().sequence_hashes.has_value());
  CHECK(*full.value().sequence_hashes == std::vector<ExternalSequenceBlockHash>{{9}});
  auto again = decode_routing_decision(encode_routing_decision(full.value()));
  REQUIRE(again.ok());
  CHECK(again.value() == full.value());
}

TEST_CASE("routing decision rejections name the field and follow the document rules") {
  CHECK(decode_routing_decision(R"({"local_hashes": [1]})").error().message() == "worker_id: missing required field");
  CHECK(decode_routing_decision(R"({"worker_id": 1, "local_hashes": [-1]})").error().field == "local_hashes[0]");
  CHECK(decode_routing_decision(R"({"worker_id": 1, "local_hashes": [1]} x)").error().kind == CodecErrorKind::bad_json);
  QueryLimits limits;
  limits.max_hashes = 2;
  CHECK(decode_routing_decision(R"({"worker_id": 1, "local_hashes": [1, 2, 3]})", limits).error().kind ==
        CodecErrorKind::limit);
}

TEST_CASE("request lifecycle decodes each op with its fields and round-trips") {
  auto admit = decode_request_lifecycle(R"({"op":"admit","request_id":"r1","dp_rank":2,"block_hashes":[5,6]})");
  REQUIRE_MESSAGE(admit.ok(), admit.error().message());
  CHECK(admit.value().op == LifecycleOp::admit);
  CHECK(admit.value().request_id == "r1");
  CHECK(admit.value().dp_rank == 2);
  CHECK(admit.value().block_hashes == std::vector<ExternalSequenceBlockHash>{{5}, {6}});
  for (const char* text :
       {R"({"op":"admit","request_id":"r1","dp_rank":2,"block_hashes":[5,6]})",
        R"({"op":"output","request_id":"r","block_hash":18446744073709551615})",
        R"({"op":"fraction","request_id":"r","fraction":0.25})", R"({"op":"finish","request_id":"r"})"}) {
    CAPTURE(text);
    auto decoded = decode_request_lifecycle(text);
    REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
    auto again = decode_request_lifecycle(encode_request_lifecycle(decoded.value()));
    REQUIRE(again.ok());
    CHECK(again.value() == decoded.value());
  }
  CHECK(decode_request_lifecycle(R"({"op":"output","request_id":"r","block_hash":7})").value().block_hash.value == 7);
  CHECK(decode_request_lifecycle(R"({"op":"fraction","request_id":"r","fraction":0.5})").value().fraction == 0.5);
}

TEST_CASE("request lifecycle rejections: unknown op, missing fields, wrong types") {
  const auto unknown = decode_request_lifecycle(R"({"op":"teleport","request_id":"r"})");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message() == "op: unknown op teleport");
  CHECK(decode_request_lifecycle(R"({"op":"finish"})").error().message() == "request_id: missing required field");
  CHECK(decode_request_lifecycle(R"({"op":"output","request_id":"r"})").error().field == "block_hash");
  CHECK(decode_request_lifecycle(R"({"op":"fraction","request_id":"r","fraction":"half"})").error().kind ==
        CodecErrorKind::wrong_type);
}

TEST_CASE("dump end marker round-trips its counts, and an error end marker is an error reply, not counts") {
  const std::string end = encode_dump_end({12, 3});
  auto decoded = decode_dump_end(end);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == DumpEnd{12, 3});
  CHECK_FALSE(decode_error_reply(end).has_value());
  const std::string failed = encode_error_reply({"internal", "dump failed after 2 chunk(s)"});
  CHECK_FALSE(decode_dump_end(failed).ok());
  REQUIRE(decode_error_reply(failed).has_value());
  CHECK(decode_error_reply(failed)->message == "dump failed after 2 chunk(s)");
}

TEST_CASE("dump chunk decodes its JSONL lines in order and fails on the first bad line") {
  auto chunk = decode_dump_chunk(
      "{\"worker_id\":1,\"event\":{\"event_id\":0,\"data\":\"cleared\"}}\n\n"
      "{\"worker_id\":2,\"event\":{\"event_id\":5,\"data\":\"cleared\"}}\n");
  REQUIRE_MESSAGE(chunk.ok(), chunk.error().message());
  REQUIRE(chunk.value().size() == 2);
  CHECK(chunk.value()[0].worker_id == 1);
  CHECK(chunk.value()[1].event.event_id == 5);
  CHECK_FALSE(decode_dump_chunk("{\"worker_id\":1}\n").ok());
}

TEST_CASE("chunked reply end marker round-trips and keeps its shipped shape") {
  const std::string end = encode_chunked_reply_end({123456789012ULL, 42});
  CHECK(end == R"({"end":true,"bytes":123456789012,"chunks":42})");
  auto decoded = decode_chunked_reply_end(end);
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message());
  CHECK(decoded.value() == ChunkedReplyEnd{123456789012ULL, 42});
  auto missing = decode_chunked_reply_end(R"({"end":true,"bytes":5})");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().field == "chunks");
  CHECK_FALSE(decode_chunked_reply_end(R"({"end":true,"bytes":-1,"chunks":1})").ok());
  CHECK_FALSE(decode_chunked_reply_end("not json").ok());
}
