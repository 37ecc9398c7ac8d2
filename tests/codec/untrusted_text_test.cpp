// untrusted_excerpt (libcodec/untrusted_text.h), the one renderer of input quoted in reasons
// and logs, and the kinds that label rejections in counters.
#include <doctest/doctest.h>

#include <string>

#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"
#include "libcodec/untrusted_text.h"

using namespace kvidx;

TEST_CASE("untrusted excerpt: short printable text is unchanged, other bytes are escaped") {
  CHECK(untrusted_excerpt("") == "");
  CHECK(untrusted_excerpt(R"({"worker_id": 3})") == R"({"worker_id": 3})");
  using namespace std::string_view_literals;
  CHECK(untrusted_excerpt("a\nb\rc\td\0e\x7f\xff"sv) == R"(a\nb\rc\td\x00e\x7f\xff)");
  CHECK(untrusted_excerpt("caf\xc3\xa9") == R"(caf\xc3\xa9)");
}

TEST_CASE("untrusted excerpt: long input is cut to the budget and gives its total length") {
  const std::string mib(1u << 20, 'x');
  const std::string cut = untrusted_excerpt(mib);
  CHECK(cut.size() == kExcerptBytes);
  CHECK(cut == std::string(kExcerptBytes - 19, 'x') + "... (1048576 bytes)");

  // Exactly the budget fits without a suffix; one byte more does not.
  CHECK(untrusted_excerpt(std::string(200, 'y')) == std::string(200, 'y'));
  CHECK(untrusted_excerpt(std::string(201, 'y')) == std::string(200 - 15, 'y') + "... (201 bytes)");

  // An escape is never cut in half.
  const std::string zeros(100, '\0');
  const std::string escaped = untrusted_excerpt(zeros, 30);
  CHECK(escaped == R"(\x00\x00\x00)" + std::string("... (100 bytes)"));
  CHECK(escaped.size() <= 30);

  // A budget too small for any head still says what was left out.
  CHECK(untrusted_excerpt(mib, 4) == "... (1048576 bytes)");
}

TEST_CASE("rejections carry a kind from a fixed set, for counter labels") {
  auto kind_of_query = [](std::string_view json) {
    QueryLimits limits;
    limits.max_hashes = 4;
    auto decoded = decode_score_request(json, limits);
    REQUIRE_FALSE(decoded.ok());
    return std::string(to_string(decoded.error().kind));
  };
  CHECK(kind_of_query("{") == "bad_json");
  CHECK(kind_of_query(R"({"local_hashes":[1]} x)") == "bad_json");
  CHECK(kind_of_query(R"({"local_hashes":[1,2,3,4,5]})") == "limit");
  CHECK(kind_of_query(R"({"local_hashes":[[[[[[[[[[1]]]]]]]]]]})") == "limit");
  CHECK(kind_of_query(R"({"token_ids":[1]})") == "missing_field");
  CHECK(kind_of_query(R"({"local_hashes":[1,-1]})") == "wrong_type");
  CHECK(kind_of_query(R"({"local_hashes":"x"})") == "wrong_type");
  CHECK(kind_of_query(R"({"token_ids":[1],"block_size":0})") == "invalid_value");
  CHECK(kind_of_query(R"({})") == "invalid_value");

  auto kind_of_event = [](std::string_view json) {
    auto decoded = decode_router_event(json);
    REQUIRE_FALSE(decoded.ok());
    return decoded.error().kind;
  };
  CHECK(kind_of_event(R"({"worker_id":1,"event":{"event_id":0,"data":"evicted"}})") == CodecErrorKind::invalid_value);
  CHECK(kind_of_event(R"({"worker_id":1})") == CodecErrorKind::missing_field);
  CHECK(kind_of_event(R"({"worker_id":-1,"event":{"event_id":0,"data":"cleared"}})") == CodecErrorKind::wrong_type);
  CHECK(kind_of_event("[") == CodecErrorKind::bad_json);
}
