// The fast RouterEvent parser against the DOM decoder it shortcuts: it may only accept what the DOM
// decoder accepts, with the same result (the wire corpus, hand-picked edge cases, a randomized
// generator of valid documents in every layout, and byte-level mutations of them).
#include <doctest/doctest.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "libcodec/event_codec.h"
#include "libcodec/fast_event_parser.h"

using namespace kvidx;
namespace fs = std::filesystem;

namespace {

enum class Verdict { fast, fallback_accepted, rejected };

struct Tally {
  std::size_t fast = 0;
  std::size_t fallback_accepted = 0;
  std::size_t rejected = 0;
  std::size_t disagreements = 0;
  void add(Verdict v) {
    if (v == Verdict::fast)
      ++fast;
    else if (v == Verdict::fallback_accepted)
      ++fallback_accepted;
    else
      ++rejected;
  }
};

bool same_line(const EventLogLine& a, const EventLogLine& b) {
  const bool ts_same = a.ts.has_value() == b.ts.has_value() &&
                       (!a.ts || std::memcmp(&*a.ts, &*b.ts, sizeof(double)) == 0);  // bit-exact, -0.0 too
  return ts_same && a.subject == b.subject && a.event == b.event;
}

// Runs one entry point both ways. A disagreement is reported with the document; the public decoder
// must equal the DOM decoder exactly (value, or error message).
template <class T, class Fast, class Dom, class Pub, class Same>
Verdict compare(std::string_view text, const DecodeLimits& limits, Fast fast, Dom dom, Pub pub, Same same, Tally& tally,
                const char* entry) {
  T fast_out{};
  const bool fast_ok = fast(text, limits, fast_out);
  const auto dom_out = dom(text, limits);
  const auto pub_out = pub(text, limits);
  auto report = [&](const char* what) {
    ++tally.disagreements;
    if (tally.disagreements <= 10) {
      FAIL_CHECK(entry << ": " << what << "\n  document: " << std::string(text)
                       << "\n  dom: " << (dom_out.ok() ? std::string("accepted") : dom_out.error().message()));
    }
  };
  if (fast_ok && !dom_out.ok()) report("fast path accepted a document the DOM decoder rejects");
  if (fast_ok && dom_out.ok() && !same(fast_out, dom_out.value())) report("fast path decoded a different value");
  if (pub_out.ok() != dom_out.ok()) report("public decoder verdict differs from the DOM decoder");
  if (!pub_out.ok() && !dom_out.ok() && pub_out.error().message() != dom_out.error().message()) {
    report("public decoder error message differs from the DOM decoder");
  }
  if (pub_out.ok() && dom_out.ok() && !same(pub_out.value(), dom_out.value())) report("public decoder value differs");
  const Verdict v = fast_ok ? Verdict::fast : dom_out.ok() ? Verdict::fallback_accepted : Verdict::rejected;
  tally.add(v);
  return v;
}

Verdict check_event(std::string_view text, const DecodeLimits& limits, Tally& tally) {
  return compare<RouterEvent>(
      text, limits, fast_codec::try_decode_router_event,
      [](std::string_view t, const DecodeLimits& l) { return decode_router_event_dom(t, l); },
      [](std::string_view t, const DecodeLimits& l) { return decode_router_event(t, l); },
      [](const RouterEvent& a, const RouterEvent& b) { return a == b; }, tally, "decode_router_event");
}

Verdict check_events(std::string_view text, const DecodeLimits& limits, Tally& tally) {
  return compare<std::vector<RouterEvent>>(
      text, limits, fast_codec::try_decode_router_events,
      [](std::string_view t, const DecodeLimits& l) { return decode_router_events_dom(t, l); },
      [](std::string_view t, const DecodeLimits& l) { return decode_router_events(t, l); },
      [](const std::vector<RouterEvent>& a, const std::vector<RouterEvent>& b) { return a == b; }, tally,
      "decode_router_events");
}

Verdict check_line(std::string_view text, const DecodeLimits& limits, Tally& tally) {
  return compare<EventLogLine>(
      text, limits, fast_codec::try_decode_event_log_line,
      [](std::string_view t, const DecodeLimits& l) { return decode_event_log_line_dom(t, l); },
      [](std::string_view t, const DecodeLimits& l) { return decode_event_log_line(t, l); }, same_line, tally,
      "decode_event_log_line");
}

void check_all(std::string_view text, const DecodeLimits& limits, Tally& tally) {
  check_event(text, limits, tally);
  check_events(text, limits, tally);
  check_line(text, limits, tally);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// ---- random valid documents in every layout the DOM decoder accepts ----------------------------

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  std::uint64_t below(std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  std::mt19937_64& rng() { return rng_; }

  std::uint64_t u64() {
    static constexpr std::uint64_t kEdges[] = {0,
                                               1,
                                               9,
                                               10,
                                               4294967295ULL,
                                               4294967296ULL,
                                               9007199254740993ULL,
                                               999999999999999999ULL,
                                               1000000000000000000ULL,
                                               9999999999999999999ULL,
                                               10000000000000000000ULL,
                                               18446744073709551614ULL,
                                               18446744073709551615ULL};
    if (chance(0.3)) return kEdges[below(std::size(kEdges))];
    return chance(0.5) ? below(1000) : rng_();
  }

  // Whitespace between tokens: usually none, sometimes any JSON whitespace.
  std::string ws() {
    if (!chance(whitespace_rate_)) return "";
    static constexpr char kWs[] = {' ', '\t', '\n', '\r'};
    std::string out;
    for (std::uint64_t n = 1 + below(3); n > 0; --n) out += kWs[below(4)];
    return out;
  }

  std::string unknown_value(int depth = 0) {
    static const char* kScalars[] = {"0",
                                     "-0",
                                     "1.5",
                                     "-12",
                                     "1e3",
                                     "2E-2",
                                     "123456789012345678901234567890",
                                     "0.000001",
                                     "true",
                                     "false",
                                     "null",
                                     R"("plain")",
                                     R"("")",
                                     R"("a\"b\\c\/d\b\f\n\r\t")",
                                     R"("\u00e9\u0000")",
                                     R"("\ud83d\ude00")",
                                     "\"\xc3\xa9\"",
                                     "\"kv.events.1\""};
    // Plain mode leaves out what the fast path hands to the DOM decoder (exponents, raw non-ASCII).
    static const char* kPlainScalars[] = {"0",
                                          "-0",
                                          "1.5",
                                          "-12",
                                          "123456789012345678901234567890",
                                          "0.000001",
                                          "true",
                                          "false",
                                          "null",
                                          R"("a\"b\\c\/d\b\f\n\r\t")",
                                          R"("\u00e9\u0000")",
                                          R"("\ud83d\ude00")",
                                          R"("")"};
    const std::uint64_t pick = below(depth < 3 ? 10 : 7);
    if (pick < 7) return plain_ ? kPlainScalars[below(std::size(kPlainScalars))] : kScalars[below(std::size(kScalars))];
    if (pick < 9) {
      std::string out = "[" + ws();
      for (std::uint64_t i = 0, n = below(3); i < n; ++i)
        out += (i ? "," + ws() : "") + unknown_value(depth + 1) + ws();
      return out + "]";
    }
    std::string out = "{" + ws();
    for (std::uint64_t i = 0, n = below(3); i < n; ++i) {
      out += (i ? "," + ws() : "") + "\"k" + std::to_string(i) + "\"" + ws() + ":" + ws() + unknown_value(depth + 1) +
             ws();
    }
    return out + "}";
  }

  struct Member {
    std::string key;
    std::string value;
  };

  std::string object(std::vector<Member> members) {
    // Unknown fields anywhere, keys in any order, now and then a duplicated member.
    if (chance(0.2)) members.push_back({unknown_key(), unknown_value()});
    std::shuffle(members.begin(), members.end(), rng_);
    if (!members.empty() && chance(duplicate_rate_)) members.push_back(members[below(members.size())]);
    std::string out = "{" + ws();
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (i > 0) out += "," + ws();
      out += "\"" + members[i].key + "\"" + ws() + ":" + ws() + members[i].value + ws();
    }
    return out + "}";
  }

  std::string unknown_key() {
    static const char* kKeys[] = {"residency_domain", "state_source", "extra", "x", "", R"(worker\u005fid)", R"(k\"q)"};
    return kKeys[below(plain_ ? 5 : std::size(kKeys))];
  }

  std::string number(std::uint64_t v) { return std::to_string(v); }

  std::string router_event() {
    std::vector<Member> body{{"event_id", number(u64())}};
    if (chance(0.6)) body.push_back({"dp_rank", number(chance(0.9) ? below(8) : u64())});
    const std::uint64_t kind = below(10);
    if (kind < 6) {
      std::vector<Member> stored;
      if (chance(0.5)) stored.push_back({"parent_hash", chance(0.2) ? "null" : number(u64())});
      if (chance(0.2))
        stored.push_back({"start_position", chance(0.2) ? "null" : number(chance(0.8) ? below(100) : u64())});
      std::string blocks = "[" + ws();
      for (std::uint64_t i = 0, n = below(6); i < n; ++i) {
        std::vector<Member> block{{"block_hash", number(u64())}, {"tokens_hash", number(u64())}};
        if (chance(0.05))
          block.push_back(
              {"mm_extra_info", chance(0.5) ? "null" : R"({"mm_hashes":[1,2],"b":{"z":1.5,"a":"\u00e9"}})"});
        blocks += (i ? "," + ws() : "") + object(std::move(block)) + ws();
      }
      stored.push_back({"blocks", blocks + "]"});
      body.push_back({"data", object({{"stored", object(std::move(stored))}})});
    } else if (kind < 8) {
      std::string hashes = "[" + ws();
      for (std::uint64_t i = 0, n = below(6); i < n; ++i) hashes += (i ? "," + ws() : "") + number(u64()) + ws();
      body.push_back({"data", object({{"removed", object({{"block_hashes", hashes + "]"}})}})});
    } else {
      static const char* kCleared[] = {R"("cleared")", R"({"cleared":null})", R"({"cleared":{}})",
                                       R"({"cleared": { }})", R"("clea\u0072ed")"};
      body.push_back({"data", kCleared[below(std::size(kCleared) - (plain_ ? 1 : 0))]});
    }
    std::vector<Member> root{{"worker_id", number(u64())}, {"event", object(std::move(body))}};
    if (chance(0.3)) {
      static const char* kTiers[] = {R"("device")", R"("host_pinned")", R"("disk")", R"("external")", "null"};
      root.push_back({"storage_tier", kTiers[below(std::size(kTiers))]});
    }
    return object(std::move(root));
  }

  std::string batch() {
    std::string out = "[" + ws();
    for (std::uint64_t i = 0, n = below(4); i < n; ++i) out += (i ? "," + ws() : "") + router_event() + ws();
    return out + "]";
  }

  std::string log_line() {
    if (chance(0.3)) return router_event();
    static const char* kTs[] = {"1733140000.25",        "1733140000",           "-0",   "0.1", "-5",
                                "18446744073709551615", "18446744073709551616", "null", "1e3"};
    const std::size_t ts_choices = std::size(kTs) - (plain_ ? 1 : 0);
    std::vector<Member> root{{"event", router_event()}};
    if (chance(0.8)) root.push_back({"ts", kTs[below(ts_choices)]});
    if (chance(0.8)) root.push_back({"subject", plain_ || chance(0.8) ? R"("kv.events.3")" : R"("kv.ev\u0065nts.3")"});
    return object(std::move(root));
  }

  std::string document() {
    const std::string doc = below(4) == 0 ? batch() : below(3) == 0 ? log_line() : router_event();
    return ws() + doc + ws();
  }

  // One byte-level mutation of `text`.
  std::string mutate(std::string text) {
    static constexpr char kInteresting[] = "{}[],:\"\\ \t\n0123456789-+.eEtrufalsn/u\x00\x1f\x7f\xc3\xa9\xef";
    auto any_byte = [&] {
      return chance(0.7) ? kInteresting[below(sizeof(kInteresting) - 1)] : static_cast<char>(below(256));
    };
    if (text.empty()) return std::string(1, any_byte());
    const std::size_t at = below(text.size());
    switch (below(8)) {
      case 0: text[at] = static_cast<char>(text[at] ^ (1 << below(8))); break;
      case 1: text[at] = any_byte(); break;
      case 2: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), any_byte()); break;
      case 3: text.erase(at, 1 + below(3)); break;
      case 4: {  // duplicate a span (often a member or a value)
        const std::size_t len = 1 + below(std::min<std::size_t>(40, text.size() - at));
        text.insert(at, text.substr(at, len));
        break;
      }
      case 5: text.resize(at); break;
      case 6: {  // a digit run grows past u64 / u32 boundaries
        std::size_t d = text.find_first_of("0123456789", at);
        if (d != std::string::npos) text.insert(d, std::string(1 + below(3), static_cast<char>('0' + below(10))));
        break;
      }
      default: {  // a u64 boundary value replaces a number
        static const char* kBoundaries[] = {"18446744073709551615",
                                            "18446744073709551616",
                                            "99999999999999999999",
                                            "4294967295",
                                            "4294967296",
                                            "00",
                                            "-1",
                                            "1.0",
                                            "1e2",
                                            "0"};
        std::size_t d = text.find_first_of("0123456789", at);
        if (d != std::string::npos) {
          std::size_t e = text.find_first_not_of("0123456789", d);
          text.replace(d, (e == std::string::npos ? text.size() : e) - d, kBoundaries[below(std::size(kBoundaries))]);
        }
      }
    }
    return text;
  }

  void set_whitespace_rate(double r) { whitespace_rate_ = r; }
  void set_duplicate_rate(double r) { duplicate_rate_ = r; }
  void set_plain(bool plain) { plain_ = plain; }

 private:
  std::mt19937_64 rng_;
  double whitespace_rate_ = 0.2;
  double duplicate_rate_ = 0.03;
  bool plain_ = false;
};

}  // namespace

TEST_CASE("fast parser: agrees with the DOM decoder on the wire corpus and accepts every valid event file") {
  Tally tally;
  for (const char* verdict : {"valid", "invalid"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(KVIDX_SOURCE_DIR) / "tests/data/wire" / verdict)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("score-query", 0) == 0) continue;
      const std::string text = read_file(entry.path());
      CAPTURE(name);
      check_all(text, {}, tally);
      const std::string schema = name.substr(0, name.find('.'));
      Tally own;
      const Verdict v = schema == "router-event"     ? check_event(text, {}, own)
                        : schema == "events-message" ? check_events(text, {}, own)
                                                     : check_line(text, {}, own);
      CHECK((v == Verdict::fast) == (std::string(verdict) == "valid"));
    }
  }
  CHECK(tally.disagreements == 0);
  CHECK(tally.fast >= 9);
}

TEST_CASE("fast parser: hand-picked edge cases agree, and the fast path takes the plain ones itself") {
  const std::string base_head = R"({"worker_id":)";
  const std::string base_tail = R"(,"event":{"event_id":1,"data":"cleared"}})";
  struct Case {
    std::string text;
    Verdict expected;
  };
  const std::vector<Case> cases{
      {base_head + "18446744073709551615" + base_tail, Verdict::fast},
      {base_head + "18446744073709551616" + base_tail, Verdict::rejected},
      {base_head + "99999999999999999999" + base_tail, Verdict::rejected},
      {base_head + "184467440737095516150" + base_tail, Verdict::rejected},
      {base_head + "0" + base_tail, Verdict::fast},
      {base_head + "00" + base_tail, Verdict::rejected},
      {base_head + "-0" + base_tail, Verdict::rejected},
      {base_head + "1.0" + base_tail, Verdict::rejected},
      {base_head + "1e2" + base_tail, Verdict::rejected},
      {base_head + "+1" + base_tail, Verdict::rejected},
      {base_head + "1" + base_tail + " ", Verdict::fast},
      {" \t\r\n{ \"worker_id\" : 1 , \"event\" : { \"event_id\" : 2 , \"data\" : { \"removed\" : { \"block_hashes\" : "
       "[ 1 , 2 ] } } } } \n",
       Verdict::fast},
      {R"({"worker_id":1,"worker_id":2,"event":{"event_id":1,"data":"cleared"}})", Verdict::fallback_accepted},
      {R"({"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[]},"stored":{"blocks":[]}}}})",
       Verdict::fallback_accepted},
      {R"({"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}}})",
       Verdict::rejected},
      {R"({"worker_id":1,"x":"\u00e9\ud83d\ude00\n","event":{"event_id":1,"data":"cleared"}})", Verdict::fast},
      {R"({"worker_id":1,"x":"\ud83d","event":{"event_id":1,"data":"cleared"}})", Verdict::rejected},
      {R"({"worker_id":1,"x":"\ude00","event":{"event_id":1,"data":"cleared"}})", Verdict::rejected},
      {R"({"worker_id":1,"x":"\u00g0","event":{"event_id":1,"data":"cleared"}})", Verdict::rejected},
      {R"({"worker_id":1,"x":1e400,"event":{"event_id":1,"data":"cleared"}})", Verdict::rejected},
      {R"({"worker_id":1,"x":1e-400,"event":{"event_id":1,"data":"cleared"}})", Verdict::fallback_accepted},
      {R"({"worker\u005fid":1,"event":{"event_id":1,"data":"cleared"}})", Verdict::fallback_accepted},
      {R"({"worker_id":1,"event":{"event_id":1,"data":"clea\u0072ed"}})", Verdict::fallback_accepted},
      {"\xef\xbb\xbf" + base_head + "1" + base_tail, Verdict::fallback_accepted},
      {R"({"worker_id":1,"event":{"event_id":1,"data":"cleared",}})", Verdict::rejected},
      {R"({"worker_id":1,"event":{"event_id":1,"data":{}}})", Verdict::rejected},
      {R"({"worker_id":1,"event":{"event_id":1,"data":{"cleared":[]}}})", Verdict::rejected},
      {R"({"worker_id":1,"event":{"event_id":1,"dp_rank":null,"data":"cleared"}})", Verdict::rejected},
      {R"({"worker_id":1,"storage_tier":null,"event":{"event_id":1,"dp_rank":4294967295,"data":"cleared"}})",
       Verdict::fast},
      {R"({"worker_id":1,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"tokens_hash":2,"block_hash":1,"mm_extra_info":null}]}}}})",
       Verdict::fast},
      {R"({"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2,"mm_extra_info":{"b":[1.50,"\u00e9"],"a":{}}}]}}}})",
       Verdict::fast},
      {R"({"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2,"mm_extra_info":[]}]}}}})",
       Verdict::rejected},
      {"{\"worker_id\":1,\"x\":\"a\x01\",\"event\":{\"event_id\":1,\"data\":\"cleared\"}}", Verdict::rejected},
      {"", Verdict::rejected},
      {"{}", Verdict::rejected},
  };
  Tally tally;
  for (const Case& c : cases) {
    CAPTURE(c.text);
    CHECK(check_event(c.text, {}, tally) == c.expected);
    check_all(c.text, {}, tally);
  }
  // Depth: the stored event is 6 levels deep; 32 is the default limit, counted over unknown
  // fields as well.
  std::string nested = "1";
  for (int i = 0; i < 31; ++i) nested = "[" + nested + "]";
  const std::string at_limit = R"({"worker_id":1,"x":)" + nested + R"(,"event":{"event_id":1,"data":"cleared"}})";
  CHECK(check_event(at_limit, {}, tally) == Verdict::fast);
  const std::string over = R"({"worker_id":1,"x":[)" + nested + R"(],"event":{"event_id":1,"data":"cleared"}})";
  CHECK(check_event(over, {}, tally) == Verdict::rejected);
  CHECK(check_event(std::string(100000, '['), {}, tally) == Verdict::rejected);
  // Limits.
  const std::string two_blocks =
      R"({"worker_id":3,"event":{"event_id":0,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":1},{"block_hash":2,"tokens_hash":2}]}}}})";
  DecodeLimits limits;
  limits.max_blocks_per_event = 2;
  CHECK(check_event(two_blocks, limits, tally) == Verdict::fast);
  limits.max_blocks_per_event = 1;
  CHECK(check_event(two_blocks, limits, tally) == Verdict::rejected);
  limits = {};
  limits.max_message_bytes = two_blocks.size();
  CHECK(check_event(two_blocks, limits, tally) == Verdict::fast);
  limits.max_message_bytes = two_blocks.size() - 1;
  CHECK(check_event(two_blocks, limits, tally) == Verdict::rejected);
  limits = {};
  limits.max_nesting_depth = 6;
  CHECK(check_event(two_blocks, limits, tally) == Verdict::fast);
  limits.max_nesting_depth = 5;
  CHECK(check_event(two_blocks, limits, tally) == Verdict::rejected);
  limits = {};
  limits.max_events_per_batch = 2;
  CHECK(check_events("[" + two_blocks + "," + two_blocks + "]", limits, tally) == Verdict::fast);
  CHECK(check_events("[" + two_blocks + "," + two_blocks + "," + two_blocks + "]", limits, tally) == Verdict::rejected);
  CHECK(check_events("[]", limits, tally) == Verdict::fast);
  CHECK(check_events("[1]", limits, tally) == Verdict::rejected);
  CHECK(check_events("[" + two_blocks + ",]", limits, tally) == Verdict::rejected);
  // Event-log lines: "worker_id" anywhere at the top level makes it a bare event.
  CHECK(check_line(R"({"event":{"event_id":1,"data":"cleared"},"ts":"x","worker_id":4})", {}, tally) == Verdict::fast);
  CHECK(check_line(R"({"ts":-0,"subject":"kv.events.4","storage_tier":5,"event":)" + two_blocks + "}", {}, tally) ==
        Verdict::fast);
  CHECK(check_line(R"({"ts":1733140000.25,"subject":null,"event":)" + two_blocks + "}", {}, tally) == Verdict::fast);
  CHECK(check_line(R"({"ts":"1","event":)" + two_blocks + "}", {}, tally) == Verdict::rejected);
  CHECK(check_line(R"({"ts":1,"subject":"kv.events.3"})", {}, tally) == Verdict::rejected);
  CHECK(tally.disagreements == 0);
}

TEST_CASE(
    "fast parser: integers of every length up to 21 digits, before every kind of byte, agree with the DOM decoder") {
  // The integer reader takes eight bytes at a time and adds a chunk's leading digits at once: every
  // digit count puts the number's end at another place of a chunk, and the byte after it decides
  // (a separator ends it; a digit, '.', 'e' or anything else does not give a valid document).
  Tally tally;
  std::size_t valid = 0;  // documents the fast path must take: the number fits and a separator follows
  std::mt19937_64 rng(7);
  const std::string head = R"({"worker_id":1,"event":{"event_id":)";
  const std::string after[] = {",", "}", " ", "\t", ".5", "e1", "E1", "x", "/", ":", "\x7f", "\xff", "\x80", "\x8a"};
  for (std::size_t digits = 1; digits <= 21; ++digits) {
    for (int sample = 0; sample < 12; ++sample) {
      std::string number;
      for (std::size_t i = 0; i < digits; ++i) number += static_cast<char>('0' + rng() % 10);
      if (sample == 0) number.assign(digits, '9');
      if (sample == 1) number = "1" + std::string(digits - 1, '0');
      if (sample >= 2 && number[0] == '0' && digits > 1) number[0] = static_cast<char>('1' + rng() % 9);
      std::uint64_t value = 0;
      const bool fits = std::from_chars(number.data(), number.data() + number.size(), value).ec == std::errc{};
      for (const std::string& next : after) {
        if (fits && (next == "," || next == "}" || next == " " || next == "\t")) ++valid;
        // The rest of a valid document follows whatever byte came after the number, so a byte
        // wrongly read as a digit shows as a document accepted with another value. Padded: the
        // fast path needs room for a chunk past the number in the long cases.
        std::string text = head + number + next + (next == "," ? "" : ",") + R"("data":"cleared"}})";
        if (next == "}") text = R"({"worker_id":1,"event":{"data":"cleared","event_id":)" + number + "}}";
        text += std::string(rng() % 24, ' ');
        check_event(text, {}, tally);
      }
    }
  }
  // The last byte of the input right after the number (no padding to load a chunk from).
  for (std::size_t digits = 1; digits <= 21; ++digits) {
    check_event(R"({"worker_id":1,"event":{"data":"cleared","event_id":)" + std::string(digits, '1') + "}}", {}, tally);
    if (digits <= 20) ++valid;  // 11...1 fits up to 20 digits
  }
  CHECK(tally.disagreements == 0);
  CHECK(tally.fast == valid);
}

TEST_CASE(
    "fast parser: randomized valid documents and byte mutations never make it accept more or decode differently") {
  Tally originals;
  Tally mutants;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    Generator gen(seed);
    gen.set_whitespace_rate(seed % 2 == 0 ? 0.9 : 0.15);  // seed 2 and 4: whitespace everywhere
    for (int doc = 0; doc < 1500; ++doc) {
      const std::string text = gen.document();
      DecodeLimits limits;
      if (gen.chance(0.1)) {
        limits.max_nesting_depth = 4 + gen.below(5);
        limits.max_blocks_per_event = gen.below(5);
        limits.max_events_per_batch = gen.below(4);
        limits.max_message_bytes = text.size() - std::min<std::size_t>(text.size(), gen.below(3));
      }
      check_all(text, limits, originals);
      for (int m = 0; m < 6; ++m) {
        std::string mutant = gen.mutate(text);
        if (gen.chance(0.3)) mutant = gen.mutate(mutant);
        check_all(mutant, limits, mutants);
      }
    }
  }
  MESSAGE("originals: fast " << originals.fast << ", fallback accepted " << originals.fallback_accepted << ", rejected "
                             << originals.rejected);
  MESSAGE("mutants:   fast " << mutants.fast << ", fallback accepted " << mutants.fallback_accepted << ", rejected "
                             << mutants.rejected);
  CHECK(originals.disagreements == 0);
  CHECK(mutants.disagreements == 0);
  // Not vacuous: the fast path takes a good share of the mutants that stay valid, and the mutants
  // exercise plenty of rejections.
  CHECK(originals.fast > originals.fallback_accepted);
  CHECK(mutants.fast > 1000);
  CHECK(mutants.rejected > 10000);
}

TEST_CASE("fast parser: takes every valid document built only of constructs it handles, in every layout") {
  Tally tally;
  for (std::uint64_t seed = 11; seed <= 12; ++seed) {
    Generator gen(seed);
    gen.set_plain(true);
    gen.set_duplicate_rate(0);
    gen.set_whitespace_rate(seed == 11 ? 0.1 : 0.9);
    for (int doc = 0; doc < 2000; ++doc) check_all(gen.document(), {}, tally);
  }
  MESSAGE("plain documents x 3 entry points: fast " << tally.fast << ", fallback accepted " << tally.fallback_accepted
                                                    << ", rejected " << tally.rejected);
  CHECK(tally.disagreements == 0);
  CHECK(tally.fallback_accepted == 0);
  CHECK(tally.fast > 4000);
}

// The layout encoders write (event_codec's own, Dynamo's serde order) has a path of its own in the
// fast parser (exact key literals, 8-digit number chunks); it must agree with the DOM decoder on
// such documents and on every byte mutation of them, and take the valid ones itself.
TEST_CASE("fast parser: the encoders' canonical layout and its mutations agree with the DOM decoder") {
  Tally originals;
  Tally mutants;
  Generator gen(21);
  std::mt19937_64 rng(21);
  static const std::uint64_t kNumbers[] = {
      0, 1, 9, 10, 99999999, 100000000, 4294967295, 4294967296, 1ULL << 53, 9999999999999999999ULL, ~0ULL - 1, ~0ULL};
  auto number = [&] { return gen.chance(0.4) ? kNumbers[gen.below(std::size(kNumbers))] : rng() >> gen.below(64); };
  for (int doc = 0; doc < 3000; ++doc) {
    std::vector<RouterEvent> batch;
    for (std::uint64_t n = 1 + gen.below(3); n > 0; --n) {
      RouterEvent e;
      e.worker_id = number();
      e.event.event_id = number();
      e.event.dp_rank = static_cast<DpRank>(gen.chance(0.2) ? number() : gen.below(4));
      if (gen.chance(0.2)) e.storage_tier = static_cast<StorageTier>(gen.below(4));
      const std::uint64_t kind = gen.below(5);
      if (kind <= 2) {
        KvCacheStoreData d;
        if (gen.chance(0.7)) d.parent_hash = ExternalSequenceBlockHash{number()};
        if (gen.chance(0.2)) d.start_position = static_cast<std::uint32_t>(number());
        for (std::uint64_t b = gen.below(6); b > 0; --b) d.blocks.push_back(StoredBlock{{number()}, {number()}});
        for (std::size_t b = 0; b < d.blocks.size(); ++b) {
          if (gen.chance(0.05)) d.set_mm_extra_info(b, R"({"a":[1,2]})");
        }
        e.event.data = d;
      } else if (kind == 3) {
        KvCacheRemoveData d;
        for (std::uint64_t b = gen.below(6); b > 0; --b) d.block_hashes.push_back(ExternalSequenceBlockHash{number()});
        e.event.data = d;
      } else {
        e.event.data = KvCacheClearData{};
      }
      batch.push_back(e);
    }
    DecodeLimits limits;
    if (gen.chance(0.1)) {
      limits.max_nesting_depth = 4 + gen.below(5);
      limits.max_blocks_per_event = gen.below(5);
      limits.max_events_per_batch = gen.below(4);
    }
    EventLogLine wrapped;
    wrapped.ts = 1.7e9 + static_cast<double>(doc);
    wrapped.subject = "kv.events.1";
    wrapped.event = batch[0];
    const std::string texts[] = {encode_router_event(batch[0]), encode_router_events(batch),
                                 encode_event_log_line(wrapped)};
    for (const std::string& text : texts) {
      check_all(text, limits, originals);
      for (int m = 0; m < 4; ++m) {
        std::string mutant = gen.mutate(text);
        if (gen.chance(0.3)) mutant = gen.mutate(mutant);
        check_all(mutant, limits, mutants);
      }
    }
  }
  MESSAGE("canonical originals: fast " << originals.fast << ", fallback accepted " << originals.fallback_accepted
                                       << ", rejected " << originals.rejected);
  MESSAGE("canonical mutants:   fast " << mutants.fast << ", fallback accepted " << mutants.fallback_accepted
                                       << ", rejected " << mutants.rejected);
  CHECK(originals.disagreements == 0);
  CHECK(mutants.disagreements == 0);
  CHECK(originals.fast > 10000);
  CHECK(mutants.fast > 1000);
  CHECK(mutants.rejected > 10000);
}

TEST_CASE("bench: decode rate, fast path vs DOM decoder" * doctest::skip(true)) {
  std::vector<std::string> docs;
  for (std::uint64_t i = 0; i < 200000; ++i) {
    RouterEvent e;
    e.worker_id = i % 64 + 1;
    e.event.event_id = i;
    e.event.dp_rank = static_cast<DpRank>(i % 2);
    KvCacheStoreData d;
    d.parent_hash = ExternalSequenceBlockHash{i * 0x9E3779B97F4A7C15ULL};
    for (std::uint64_t b = 0; b < 4; ++b) d.blocks.push_back(StoredBlock{{(i + b) * 1000003}, {i * 16 + b}});
    e.event.data = d;
    docs.push_back(encode_router_event(e));
  }
  using Clock = std::chrono::steady_clock;
  auto rate = [&](auto&& decode) {
    const auto t0 = Clock::now();
    std::size_t ok = 0;
    for (const auto& doc : docs) ok += decode(doc) ? 1 : 0;
    REQUIRE(ok == docs.size());
    return static_cast<double>(docs.size()) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double fast = rate([](const std::string& d) { return decode_router_events(d).ok(); });
  const double dom = rate([](const std::string& d) { return decode_router_events_dom(d).ok(); });
  std::printf("decode (4-block Stored events, one thread): fast %.0f events/s, DOM %.0f events/s (x%.1f)\n", fast, dom,
              fast / dom);
}
