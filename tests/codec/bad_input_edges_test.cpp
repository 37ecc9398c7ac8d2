// The edges of bad input at the decoders: a document is one JSON value and nothing after it but
// whitespace (NUL bytes included: nlohmann's lexer took a NUL for the end of input), and a
// rejection's reason never grows with the input (a 100,001-digit number, a 1 MiB string or key are
// quoted as a bounded excerpt with their length).
#include <doctest/doctest.h>

#include <string>

#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"

using namespace kvidx;

namespace {

constexpr std::string_view kCleared = R"({"worker_id":3,"event":{"event_id":2,"data":"cleared","dp_rank":0}})";
constexpr std::string_view kCaptured =
    R"({"ts":1.5,"subject":"kv.events.3","event":{"worker_id":3,"event":{"event_id":2,"data":"cleared"}}})";
constexpr std::string_view kQuery = R"({"local_hashes":[1,2,3]})";

// The longest reason a rejection may carry: the field path, the decoder's own words and one
// bounded excerpt of the input.
constexpr std::size_t kBoundedReason = 512;

template <class T>
std::string rejection(const Decoded<T>& decoded) {
  REQUIRE_FALSE(decoded.ok());
  const std::string message = decoded.error().message();
  CHECK_FALSE(message.empty());
  return message;
}

std::string with_suffix(std::string_view json, std::string_view suffix) {
  std::string out(json);
  out.append(suffix.data(), suffix.size());
  return out;
}

}  // namespace

TEST_CASE("bad input: trailing bytes after the JSON value are rejected by every decoder, NUL bytes included") {
  using namespace std::string_view_literals;
  const std::string_view garbage = "\0\0garbage"sv;
  REQUIRE(garbage.size() == 9);
  const std::string expected =
      "invalid JSON: trailing bytes after the JSON value at offset " + std::to_string(kCleared.size());

  for (const std::string_view suffix : {garbage, "\0"sv, " \n\0"sv, " x"sv, "{}"sv, ","sv}) {
    CAPTURE(suffix.size());
    const std::string event = with_suffix(kCleared, suffix);
    const std::size_t offset = kCleared.size() + (suffix[0] == ' ' ? (suffix[1] == '\n' ? 2 : 1) : 0);
    const std::string at = "trailing bytes after the JSON value at offset " + std::to_string(offset);
    CHECK(rejection(decode_router_event(event)).find(at) != std::string::npos);
    CHECK(rejection(decode_router_event_dom(event)).find(at) != std::string::npos);
    CHECK(rejection(decode_router_events(event)).find(at) != std::string::npos);
    CHECK(rejection(decode_router_events_dom(event)).find(at) != std::string::npos);
    CHECK(rejection(decode_event_log_line(event)).find(at) != std::string::npos);
    CHECK(
        rejection(decode_event_log_line(with_suffix(kCaptured, suffix))).find("trailing bytes after the JSON value") !=
        std::string::npos);
    const std::string batch = with_suffix("[" + std::string(kCleared) + "]", suffix);
    CHECK(rejection(decode_router_events(batch)).find("trailing bytes after the JSON value") != std::string::npos);
    CHECK(rejection(decode_score_request(with_suffix(kQuery, suffix))).find("trailing bytes after the JSON value") !=
          std::string::npos);
    CHECK(rejection(decode_remove_worker_request(with_suffix(R"({"worker_id":3})", suffix)))
              .find("trailing bytes after the JSON value") != std::string::npos);
  }
  CHECK(rejection(decode_router_event(with_suffix(kCleared, garbage))).rfind(expected, 0) == 0);

  // Whitespace after the value stays legal, and a broken value is reported as broken, not as trailing bytes.
  CHECK(decode_router_event(with_suffix(kCleared, " \t\r\n")).ok());
  CHECK(decode_router_events(with_suffix(kCleared, "\n")).ok());
  CHECK(decode_event_log_line(with_suffix(kCaptured, "  ")).ok());
  CHECK(decode_score_request(with_suffix(kQuery, "\n")).ok());
  const std::string broken = rejection(decode_router_event(with_suffix(R"({"worker_id":3,"event":tru})", garbage)));
  CHECK(broken.rfind("invalid JSON:", 0) == 0);
  CHECK(broken.find("trailing bytes") == std::string::npos);
  // A NUL inside the value is not "the end of the input" either.
  CHECK_FALSE(
      decode_router_event(std::string(R"({"worker_id":3,"event":{"event_id":2,"data":"cleared"}})").insert(20, 1, '\0'))
          .ok());
}

TEST_CASE("bad input: a reason quotes a huge token as a bounded excerpt with its length") {
  const std::string digits(100'001, '7');
  const std::string mib(1u << 20, 'x');

  // A 100,001-digit number overflows a double: nlohmann's message quoted all of it.
  const std::string number =
      rejection(decode_router_event(R"({"worker_id":)" + digits + R"(,"event":{"event_id":2,"data":"cleared"}})"));
  CAPTURE(number.substr(0, 600));
  CHECK(number.size() <= kBoundedReason);
  CHECK(number.find("(100001 bytes)") != std::string::npos);
  CHECK(number.find("7777") != std::string::npos);

  // A 1 MiB string where a variant name, a tier or a whole document belongs.
  const std::string variant =
      rejection(decode_router_event(R"({"worker_id":3,"event":{"event_id":2,"data":")" + mib + R"("}})"));
  CHECK(variant.size() <= kBoundedReason);
  CHECK(variant.rfind("event.data: unknown variant 'xxx", 0) == 0);
  CHECK(variant.find("(1048576 bytes)") != std::string::npos);
  const std::string key =
      rejection(decode_router_event(R"({"worker_id":3,"event":{"event_id":2,"data":{")" + mib + R"(":{}}}})"));
  CHECK(key.size() <= kBoundedReason);
  CHECK(key.find("(1048576 bytes)") != std::string::npos);
  const std::string tier = rejection(decode_router_event(R"({"worker_id":3,"storage_tier":")" + mib +
                                                         R"(","event":{"event_id":2,"data":"cleared"}})"));
  CHECK(tier.size() <= kBoundedReason);
  CHECK(tier.find("(1048576 bytes)") != std::string::npos);
  const std::string unterminated = rejection(decode_router_event(R"({"worker_id":3,"event":")" + mib));
  CHECK(unterminated.size() <= kBoundedReason);
  CHECK(unterminated.rfind("invalid JSON:", 0) == 0);
  const std::string unterminated_query = rejection(decode_score_request(R"({"local_hashes":[1],"lora_name":")" + mib));
  CHECK(unterminated_query.size() <= kBoundedReason);
  CHECK(unterminated_query.rfind("invalid JSON:", 0) == 0);
  CHECK(unterminated_query.find("(1048577 bytes)") != std::string::npos);  // the quote and the string

  // Control and non-ASCII bytes in an excerpt are escaped: a reason is one printable line (it
  // becomes a log line and a NATS header value).
  const std::string nasty = rejection(decode_router_event(
      "{\"worker_id\":3,\"storage_tier\":\"a\\r\\nb\xc3\xa9\",\"event\":{\"event_id\":2,\"data\":\"cleared\"}}"));
  for (const char c : nasty) CHECK((c >= 0x20 && c <= 0x7e));
  CHECK(nasty.find("a\\r\\nb\\xc3\\xa9") != std::string::npos);
}
