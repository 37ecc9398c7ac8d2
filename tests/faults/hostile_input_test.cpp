// Hostile input: each kind of bad message with the exact error it gets and the counter that
// records it. Decoder level (no NATS) for the sizes NATS cannot carry (8 MiB+, 10^6 blocks), then
// through a running service (dead letters with their reason header, stats and /metrics counters),
// and through `kvidx serve` flags that change the limits. The edges: bytes after a valid document,
// huge tokens quoted in reasons and logs, floods of bad messages in the log, the stream limit,
// dead letters too big for the server's max_payload.
#include <doctest/doctest.h>

#include <signal.h>

#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>

#include "libbus/service.h"
#include "tests/faults/fault_support.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsServer;
using kvidx::testing::TempDir;

namespace {

std::string store_json(WorkerId worker, std::size_t blocks, std::uint64_t first = 1) {
  std::string out = R"({"worker_id":)" + std::to_string(worker) +
                    R"(,"event":{"event_id":0,"data":{"stored":{"parent_hash":null,"blocks":[)";
  out.reserve(out.size() + blocks * 40);
  for (std::size_t i = 0; i < blocks; ++i) {
    if (i) out += ',';
    out += R"({"block_hash":)" + std::to_string(first + i) + R"(,"tokens_hash":)" + std::to_string(first + i) + "}";
  }
  out += "]}}}}";
  return out;
}

std::string nested(std::size_t depth) {
  // An unknown (ignored) block field whose value is nested `depth` arrays deep.
  return R"({"worker_id":1,"event":{"event_id":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":1,"extra":)" +
         std::string(depth, '[') + std::string(depth, ']') + "}]}}}}";
}

// Everything published on kv.deadletter, in arrival order.
class DeadLetterInbox {
 public:
  struct Letter {
    std::string reason;
    std::string subject;
    std::optional<std::string> truncated;
    std::string body;
  };

  explicit DeadLetterInbox(bus::Connection& conn) {
    auto sub = conn.subscribe("kv.deadletter", [this](bus::Message m) {
      std::lock_guard lock(mutex_);
      letters_.push_back({m.header(bus::kDeadLetterReasonHeader).value_or(""),
                          m.header(bus::kDeadLetterSubjectHeader).value_or(""),
                          m.header(bus::kDeadLetterTruncatedHeader), std::string(m.data())});
    });
    REQUIRE(sub.ok());
    sub_ = std::move(sub).value();
    REQUIRE(conn.flush().ok());
  }

  // Waits up to 10 s for `n` letters, then a little longer for any extra one; returns them all.
  std::vector<Letter> wait_for(std::size_t n) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      {
        std::lock_guard lock(mutex_);
        if (letters_.size() >= n) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard lock(mutex_);
    return letters_;
  }

 private:
  std::mutex mutex_;
  std::vector<Letter> letters_;
  bus::Subscription sub_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::size_t count_lines_with(const std::string& text, std::string_view needle) {
  std::size_t n = 0;
  for (const auto& line : lines_of(text)) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

std::string error_of(std::string_view json, const DecodeLimits& limits = {}) {
  auto decoded = decode_router_events(json, limits);
  REQUIRE_FALSE(decoded.ok());
  const std::string message = decoded.error().message();
  CHECK_FALSE(message.empty());
  return message;
}

}  // namespace

TEST_SUITE("hostile") {

TEST_CASE("hostile: oversize messages are rejected before parsing, naming the limit") {
  std::string big = store_json(1, 4);
  big.append((8u << 20) + 1 - big.size(), ' ');  // valid JSON, one byte over 8 MiB
  CHECK(error_of(big) == "message of 8388609 bytes exceeds the limit of 8388608 bytes");
  DecodeLimits small;
  small.max_message_bytes = 100;
  CHECK(error_of(store_json(1, 4), small) == "message of 220 bytes exceeds the limit of 100 bytes");
  CHECK(decode_router_events(store_json(1, 4)).ok());
}

TEST_CASE("hostile: deeply nested JSON is rejected without recursion, even a million levels deep") {
  CHECK(decode_router_events(nested(24)).ok());  // 6 levels of envelope + 24 = 30
  CHECK(error_of(nested(40)) == "JSON nesting deeper than 32 levels");
  CHECK(error_of(nested(1'000'000)) == "JSON nesting deeper than 32 levels");
}

TEST_CASE("hostile: a 10^6-block store event is bounded by the message size, then by the block limit") {
  const std::string huge = store_json(1, 1'000'000);
  CHECK(huge.size() > (8u << 20));
  CHECK(error_of(huge).find("exceeds the limit of 8388608 bytes") != std::string::npos);
  DecodeLimits roomy;
  roomy.max_message_bytes = 128u << 20;
  roomy.max_blocks_per_event = 999'999;
  CHECK(error_of(huge, roomy) == "event.data.stored.blocks: 1000000 blocks exceed the limit of 999999 per event");
  roomy.max_blocks_per_event = 1u << 20;
  auto decoded = decode_router_events(huge, roomy);
  REQUIRE(decoded.ok());
  REQUIRE(decoded.value().size() == 1);
  // The tree takes it as one long chain and gives it all back.
  LaneIndexer indexer(1);
  REQUIRE(indexer.enqueue_event(decoded.value()[0]) == IndexerStatus::ok);
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(indexer.shard_sizes().block_count == 1'000'000);
  RouterEvent clear = testing::make_clear_event_with_dp_rank(1, 0);
  clear.event.event_id = 1;
  REQUIRE(indexer.enqueue_event(clear) == IndexerStatus::ok);
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  CHECK(indexer.shard_sizes().block_count == 0);
  CHECK(indexer.shard_sizes().node_count <= 1);
}

TEST_CASE("hostile: u64 overflow and negative numbers are rejected with the field's path") {
  CHECK(error_of(R"({"worker_id":18446744073709551616,"event":{"event_id":0,"data":"cleared"}})")
            .rfind("worker_id: expected an unsigned 64-bit integer", 0) == 0);
  CHECK(decode_router_events(
            R"({"worker_id":18446744073709551615,"event":{"event_id":18446744073709551615,"data":"cleared"}})")
            .ok());
  CHECK(error_of(R"({"worker_id":-1,"event":{"event_id":0,"data":"cleared"}})") ==
        "worker_id: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":-5,"data":"cleared"}})") ==
        "event.event_id: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":0,"data":"cleared","dp_rank":4294967296}})") ==
        "event.dp_rank: value 4294967296 does not fit an unsigned 32-bit integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":0,"data":{"removed":{"block_hashes":[1,-2]}}}})") ==
        "event.data.removed.block_hashes[1]: expected an unsigned 64-bit integer, got negative integer");
  CHECK(error_of(R"({"worker_id":1,"event":{"event_id":0,"data":{"removed":{"block_hashes":[1e30]}}}})")
            .rfind("event.data.removed.block_hashes[0]: expected an unsigned 64-bit integer", 0) == 0);
}

TEST_CASE(
    "hostile: through the service, each bad message is dead-lettered with its reason and counted, valid but "
    "inapplicable events are counted by the tree and never corrupt it") {
  NatsServer server;
  bus::ServiceConfig config;
  config.nats_url = server.url();
  config.durable = "hostile";
  config.lanes = 2;
  config.snapshot_interval = std::chrono::milliseconds(0);
  config.limits.max_message_bytes = 64 * 1024;
  config.limits.max_blocks_per_event = 1000;
  config.query_limits.max_hashes = 16;
  bus::KvidxService service(config);
  REQUIRE(service.start().ok());
  bus::Connection conn = connect_to(server);
  std::mutex mutex;
  std::vector<std::string> reasons;
  auto sub = conn.subscribe("kv.deadletter", [&](bus::Message m) {
    std::lock_guard lock(mutex);
    reasons.push_back(std::string(m.header(bus::kDeadLetterReasonHeader).value_or("")));
  });
  REQUIRE(sub.ok());
  REQUIRE(conn.flush().ok());
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  auto publish = [&](const std::string& subject, const std::string& body) {
    auto ack = js.value().publish(subject, body);
    REQUIRE_MESSAGE(ack.ok(), ack.error().message);
    return ack.value().sequence;
  };

  std::string oversize = store_json(1, 4);
  oversize.append(100 * 1024, ' ');
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {oversize, "decode: message of 102620 bytes exceeds the limit of 65536 bytes"},
      {nested(64), "decode: JSON nesting deeper than 32 levels"},
      {store_json(1, 1001), "decode: event.data.stored.blocks: 1001 blocks exceed the limit of 1000 per event"},
      {R"({"worker_id":1,"event":{"event_id":18446744073709551616,"data":"cleared"}})",
       "decode: event.event_id: expected an unsigned 64-bit integer"},
      {R"({"worker_id":1,"event":{"event_id":-1,"data":"cleared"}})",
       "decode: event.event_id: expected an unsigned 64-bit integer, got negative integer"},
  };
  for (const auto& [body, reason] : hostile) publish("kv.events.1", body);

  // Valid JSON the tree cannot apply: counted by the tree, nothing changes.
  RouterEvent base = testing::make_store_event(1, {1, 2, 3});
  publish("kv.events.1", encode_router_event(base));
  RouterEvent orphan = testing::make_store_event_with_parent(1, {7, 7, 7}, {8});  // parent never stored
  orphan.event.event_id = 1;
  publish("kv.events.1", encode_router_event(orphan));
  RouterEvent unknown_remove = testing::remove_event(1, 2, 0, {ExternalSequenceBlockHash{424242}});
  publish("kv.events.1", encode_router_event(unknown_remove));
  RouterEvent unknown_clear = testing::make_clear_event_with_dp_rank(99, 3);
  const std::uint64_t last = publish("kv.events.99", encode_router_event(unknown_clear));

  REQUIRE(service.wait_for_acked_sequence(last, std::chrono::seconds(20)));
  REQUIRE(service.indexer().flush() == IndexerStatus::ok);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    {
      std::lock_guard lock(mutex);
      if (reasons.size() >= hostile.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard lock(mutex);
    REQUIRE(reasons.size() == hostile.size());
    for (std::size_t i = 0; i < hostile.size(); ++i) {
      CHECK_MESSAGE(reasons[i].rfind(hostile[i].second, 0) == 0, reasons[i] << " vs " << hostile[i].second);
    }
  }
  const bus::ServiceStats stats = service.stats();
  CHECK(stats.dead_letters == hostile.size());
  CHECK(stats.events_applied == 4);
  const auto tree = service.indexer().metrics();
  CHECK(tree.applied[0][static_cast<std::size_t>(ApplyStatus::parent_not_found)] == 1);
  CHECK(tree.applied[1][static_cast<std::size_t>(ApplyStatus::block_not_found)] == 1);
  const auto dump = service.indexer().dump_events();
  REQUIRE(dump.has_value());
  LaneIndexer only_base(1);
  REQUIRE(only_base.enqueue_event(base) == IndexerStatus::ok);
  CHECK(normal_form(*dump) == normal_form(*only_base.dump_events()));
  CHECK(service.indexer().shard_sizes().block_count == 3);
  CHECK(service.indexer().shard_sizes().worker_count == 1);
  const std::string metrics = service.render_metrics();
  CHECK(metrics.find("kvidx_dead_letters_total 5") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_tree_apply_total{type="stored",status="parent_not_found"} 1)") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_tree_apply_total{type="removed",status="block_not_found"} 1)") != std::string::npos);
  auto admin = admin_stats(conn);
  REQUIRE(admin.has_value());
  CHECK(admin->at("apply_parent_not_found") == 1);
  CHECK(admin->at("apply_block_not_found") == 1);

  // Score queries: over the hash limit, nested, negative -> bad_request with the reason.
  const bus::Subjects subjects;
  auto ask = [&](const std::string& body) {
    auto reply = conn.request(subjects.query_scores(), body, 2000);
    REQUIRE(reply.ok());
    return Json::parse(reply.value().data());
  };
  Json sixteen = Json::array();
  for (int i = 0; i < 16; ++i) sixteen.push_back(i + 1);
  CHECK(ask(Json{{"local_hashes", sixteen}}.dump()).contains("scores"));
  sixteen.push_back(17);
  const Json too_long = ask(Json{{"local_hashes", sixteen}}.dump());
  CHECK(too_long.at("error").at("code") == "bad_request");
  CHECK(too_long.at("error").at("message") == "local_hashes: 17 entries exceed the limit of 16");
  const Json deep = ask(R"({"local_hashes":[[[[[[[[[[1]]]]]]]]]]})");
  CHECK(deep.at("error").at("message") == "JSON nesting deeper than 8 levels");
  const Json negative = ask(R"({"local_hashes":[1,-1]})");
  CHECK(negative.at("error").at("message") ==
        "local_hashes[1]: expected an unsigned 64-bit integer, got negative integer");
}

TEST_CASE("hostile: kvidx serve limit flags change what is accepted") {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  const bus::Subjects subjects;
  Json five = Json::array({1, 2, 3, 4, 5});
  for (const bool limited : {true, false}) {
    std::vector<std::string> flags = {"--snapshot-interval", "0", "--no-restore"};
    if (limited)
      flags.insert(flags.end(),
                   {"--max-blocks-per-event", "8", "--max-query-hashes", "4", "--max-message-bytes", "4096"});
    ServeProcess serve(server, dir, limited ? "limited" : "defaults", flags);
    wait_ready(conn, serve);
    const std::uint64_t before = admin_stats(conn)->at("dead_letters").get<std::uint64_t>();
    ensure_events_stream(conn);
    std::string padded = store_json(5, 2);
    padded.append(5000, ' ');
    REQUIRE(js.value().publish("kv.events.5", padded).ok());
    REQUIRE(js.value().publish("kv.events.5", store_json(5, 9, 100)).ok());
    auto last = js.value().publish("kv.events.6", store_json(6, 8));
    REQUIRE(last.ok());
    const Json stats = wait_acked(conn, serve, last.value().sequence);
    auto reply = conn.request(subjects.query_scores(), Json{{"local_hashes", five}}.dump(), 2000);
    REQUIRE(reply.ok());
    const Json answer = Json::parse(reply.value().data());
    if (limited) {
      CHECK(stats.at("dead_letters").get<std::uint64_t>() - before == 2);
      REQUIRE(answer.contains("error"));
      CHECK(answer.at("error").at("message") == "local_hashes: 5 entries exceed the limit of 4");
    } else {
      CHECK(stats.at("dead_letters").get<std::uint64_t>() == before);
      CHECK(answer.contains("scores"));
    }
    CHECK(serve.stop(SIGTERM) == 0);
  }
}

TEST_CASE("hostile: kvidx serve rejects bad limit flags as usage errors") {
  using kvidx::testing::run_command;
  const std::string kvidx = testing::built_binary("kvidx");
  CHECK(run_command({kvidx, "serve", "--max-blocks-per-event", "0", "--check-config"}).exit_code == 2);
  CHECK(run_command({kvidx, "serve", "--max-message-bytes", "-5", "--check-config"}).exit_code == 2);
  const auto ok = run_command({kvidx, "serve", "--max-query-hashes", "64", "--check-config"});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("max query hashes 64") != std::string::npos);
}

TEST_CASE("hostile: kvidx serve dead-letters valid JSON followed by other bytes, with the offset in Kvidx-Reason") {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  ServeProcess serve(server, dir, "trailing", {"--snapshot-interval", "0", "--no-restore"});
  wait_ready(conn, serve);
  DeadLetterInbox inbox(conn);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());

  const std::string event = encode_router_event(testing::make_store_event(5, {1, 2}));
  std::string garbage = event;
  garbage.append(std::string("\0\0garbage", 9));
  std::string spaced = encode_router_event(testing::make_store_event(6, {3})) + " \r\n\t";
  REQUIRE(js.value().publish("kv.events.5", garbage).ok());
  REQUIRE(js.value().publish("kv.events.5", event + "{}").ok());
  auto last = js.value().publish("kv.events.6", spaced);  // trailing whitespace: accepted
  REQUIRE(last.ok());
  const Json stats = wait_acked(conn, serve, last.value().sequence);

  const auto letters = inbox.wait_for(2);
  REQUIRE(letters.size() == 2);
  const std::string reason =
      "decode: invalid JSON: trailing bytes after the JSON value at offset " + std::to_string(event.size());
  CHECK(letters[0].reason == reason + R"(: \x00\x00garbage)");
  CHECK(letters[0].subject == "kv.events.5");
  CHECK(letters[0].body == garbage);  // the message as received, NUL bytes and all
  CHECK_FALSE(letters[0].truncated.has_value());
  CHECK(letters[1].reason == reason + ": {}");
  CHECK(stats.at("dead_letters") == 2);
  CHECK(stats.at("events_applied") == 1);
  CHECK(stats.at("blocks") == 1);  // only worker 6's block: the rejected messages never reached the tree

  // Request lifecycle messages follow the same document rules.
  const std::string admit = R"({"op":"admit","request_id":"r1","block_hashes":[1]})";
  auto refused = conn.request("kv.requests.5", admit + std::string("\0x", 2), 2000);
  REQUIRE(refused.ok());
  CHECK(std::string(refused.value().data())
            .find("trailing bytes after the JSON value at offset " + std::to_string(admit.size())) !=
        std::string::npos);
  auto accepted = conn.request("kv.requests.5", admit + "\n", 2000);
  REQUIRE(accepted.ok());
  CHECK(std::string(accepted.value().data()) == R"({"ok":true})");
  CHECK(serve.stop(SIGTERM) == 0);
}

TEST_CASE("hostile: kvidx serve quotes a huge token as a bounded excerpt in Kvidx-Reason, the log and error replies") {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  ServeProcess serve(server, dir, "huge", {"--snapshot-interval", "0", "--no-restore"});
  wait_ready(conn, serve);
  DeadLetterInbox inbox(conn);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());

  const std::string digits(100'001, '9');
  const std::string string(1'000'000, 'x');  // under NATS' 1 MiB max_payload with the envelope
  REQUIRE(js.value()
              .publish("kv.events.5", R"({"worker_id":)" + digits + R"(,"event":{"event_id":0,"data":"cleared"}})")
              .ok());
  REQUIRE(
      js.value().publish("kv.events.5", R"({"worker_id":5,"event":{"event_id":0,"data":")" + string + R"("}})").ok());
  auto last =
      js.value().publish("kv.events.5", R"({"worker_id":5,"event":{"event_id":0,"data":{")" + string + R"(":null}}})");
  REQUIRE(last.ok());
  const Json stats = wait_acked(conn, serve, last.value().sequence);
  CHECK(stats.at("dead_letters") == 3);

  const auto letters = inbox.wait_for(3);
  REQUIRE(letters.size() == 3);
  for (const auto& letter : letters) {
    CAPTURE(letter.reason.substr(0, 300));
    CHECK(letter.reason.size() <= 512);
    CHECK(letter.reason.rfind("decode: ", 0) == 0);
  }
  CHECK(letters[0].reason.find("(100001 bytes)") != std::string::npos);
  CHECK(letters[1].reason.rfind("decode: event.data: unknown variant 'xxxxxxxx", 0) == 0);
  CHECK(letters[1].reason.find("(1000000 bytes)") != std::string::npos);
  CHECK(letters[2].reason.find("(1000000 bytes)") != std::string::npos);

  // A bad score query with a huge token: the error reply is bounded too.
  auto reply = conn.request(bus::Subjects().query_scores(), R"({"local_hashes":[1],"lora_name":")" + string, 5000);
  REQUIRE(reply.ok());
  const Json answer = Json::parse(reply.value().data());
  REQUIRE(answer.contains("error"));
  CHECK(answer.at("error").at("message").get<std::string>().size() <= 512);
  CHECK(answer.at("error").at("message").get<std::string>().rfind("invalid JSON:", 0) == 0);

  CHECK(serve.stop(SIGTERM) == 0);
  std::size_t longest = 0;
  for (const auto& line : lines_of(serve.log())) longest = std::max(longest, line.size());
  CHECK(longest <= 1024);
  CHECK(count_lines_with(serve.log(), "dead-lettered a message of") >= 1);
}

TEST_CASE(
    "hostile: a flood of malformed messages and queries makes a handful of log lines while every one is counted") {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  ServeProcess serve(server, dir, "flood", {"--snapshot-interval", "0", "--no-restore"});
  wait_ready(conn, serve);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  constexpr int kBadMessages = 2000;
  constexpr int kBadQueries = 300;
  constexpr int kBadLifecycle = 300;
  for (int i = 0; i < kBadMessages; ++i)
    REQUIRE(js.value().publish("kv.events.7", "{not json " + std::to_string(i)).ok());
  const bus::Subjects subjects;
  for (int i = 0; i < kBadQueries; ++i) {
    auto reply = conn.request(subjects.query_scores(), R"({"local_hashes":[)" + std::to_string(i) + "]] ", 2000);
    REQUIRE(reply.ok());
    CHECK(std::string(reply.value().data()).find("bad_request") != std::string::npos);
  }
  for (int i = 0; i < kBadLifecycle; ++i) {
    auto reply =
        conn.request("kv.requests.7", R"({"op":"teleport","request_id":"r)" + std::to_string(i) + R"("})", 2000);
    REQUIRE(reply.ok());
  }
  auto last = js.value().publish("kv.events.7", encode_router_event(testing::make_store_event(7, {1})));
  REQUIRE(last.ok());
  const Json stats = wait_acked(conn, serve, last.value().sequence);
  CHECK(stats.at("dead_letters") == kBadMessages);
  CHECK(stats.at("queries_rejected") == kBadQueries);
  CHECK(stats.at("queries_rejected_by_reason").at("bad_json") == kBadQueries);
  CHECK(stats.at("events_applied") == 1);
  CHECK(serve.stop(SIGTERM) == 0);

  // One line per kind and per 10 s (the test takes a few seconds), and what was not logged is
  // accounted for: the lines' "(N more not logged ...)" notes and the closing summary add up.
  const std::string log = serve.log();
  const std::size_t dead_letter_lines = count_lines_with(log, "dead-lettered a message");
  CHECK(dead_letter_lines >= 1);
  CHECK(dead_letter_lines <= 3);
  CHECK(count_lines_with(log, "score query of") >= 1);
  CHECK(count_lines_with(log, "score query of") <= 3);
  CHECK(count_lines_with(log, "request lifecycle message on") >= 1);
  CHECK(count_lines_with(log, "request lifecycle message on") <= 3);
  std::uint64_t accounted = dead_letter_lines;
  const std::regex note(R"(dead-lettered a message of .* \((\d+) more not logged since the previous such line\))");
  const std::regex summary(R"((\d+) more 'dead_letter:decode' warning\(s\) were not logged)");
  for (const auto& line : lines_of(log)) {
    std::smatch m;
    if (std::regex_search(line, m, note) || std::regex_search(line, m, summary)) accounted += std::stoull(m[1]);
  }
  CHECK(accounted == kBadMessages);
}

TEST_CASE(
    "hostile: kvidx serve --max-streams bounds distinct (worker, rank) streams, removing a worker frees its places") {
  NatsServer server;
  TempDir dir;
  bus::Connection conn = connect_to(server);
  ServeProcess serve(server, dir, "streams", {"--snapshot-interval", "0", "--no-restore", "--max-streams", "3"});
  CHECK(wait_ready(conn, serve).at("max_streams") == 3);
  DeadLetterInbox inbox(conn);
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());

  REQUIRE(js.value().publish("kv.events.1", encode_router_event(testing::make_store_event(1, {1}))).ok());
  REQUIRE(
      js.value().publish("kv.events.1", encode_router_event(testing::make_store_event_with_dp_rank(1, {2}, 1))).ok());
  REQUIRE(js.value().publish("kv.events.2", encode_router_event(testing::make_store_event(2, {3}))).ok());
  // A fourth stream: the whole message is refused, the known stream's event in it too.
  const std::vector<RouterEvent> batch = {testing::make_store_event(3, {4}),
                                          testing::make_store_event_with_dp_rank(3, {5}, 2)};
  const std::string refused = encode_router_events(batch);
  REQUIRE(js.value().publish("kv.events.3", refused).ok());
  RouterEvent next = testing::make_store_event_with_parent(1, {1}, {6});
  next.event.event_id = 1;
  auto last = js.value().publish("kv.events.1", encode_router_event(next));  // a known stream goes on
  REQUIRE(last.ok());
  Json stats = wait_acked(conn, serve, last.value().sequence);
  CHECK(stats.at("stream_limit_rejections") == 1);
  CHECK(stats.at("dead_letters") == 1);
  CHECK(stats.at("streams") == 3);
  CHECK(stats.at("blocks") == 4);
  auto letters = inbox.wait_for(1);
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].reason.rfind("stream limit reached: 3 (worker, rank) streams; this message would add 2 new "
                                "(worker 3 rank 0, worker 3 rank 2)",
                                0) == 0);
  CHECK(letters[0].body == refused);

  // Removing worker 1 frees its two places: the same message is taken now.
  auto removed = conn.request(bus::Subjects().admin_remove_worker(), R"({"worker_id":1})", 5000);
  REQUIRE(removed.ok());
  CHECK(std::string(removed.value().data()) == R"({"ok":true})");
  last = js.value().publish("kv.events.3", refused);
  REQUIRE(last.ok());
  stats = wait_acked(conn, serve, last.value().sequence);
  CHECK(stats.at("stream_limit_rejections") == 1);
  CHECK(stats.at("streams") == 3);
  CHECK(stats.at("blocks") == 3);
  CHECK(serve.stop(SIGTERM) == 0);

  using kvidx::testing::run_command;
  const std::string kvidx = testing::built_binary("kvidx");
  const auto defaults = run_command({kvidx, "serve", "--check-config"});
  CHECK(defaults.exit_code == 0);
  CHECK(defaults.out.find("max streams 1000000") != std::string::npos);
  const auto unlimited = run_command({kvidx, "serve", "--max-streams", "0", "--check-config"});
  CHECK(unlimited.out.find("max streams unlimited") != std::string::npos);
  CHECK(run_command({kvidx, "serve", "--max-streams", "-1", "--check-config"}).exit_code == 2);
  TempDir config_dir;
  std::ofstream(config_dir.file("kvidx.toml")) << "max-streams = 7\n";
  const auto from_file = run_command({kvidx, "serve", "--config", config_dir.file("kvidx.toml"), "--check-config"});
  CHECK(from_file.exit_code == 0);
  CHECK(from_file.out.find("max streams 7,") != std::string::npos);
}

TEST_CASE("hostile: rejected score queries are counted by reason in kvidx_queries_rejected_total and stats") {
  NatsServer server;
  bus::ServiceConfig config;
  config.nats_url = server.url();
  config.durable = "queries";
  config.snapshot_interval = std::chrono::milliseconds(0);
  config.query_limits.max_hashes = 4;
  bus::KvidxService service(config);
  REQUIRE(service.start().ok());
  bus::Connection conn = connect_to(server);
  const bus::Subjects subjects;
  auto ask = [&](const std::string& body) {
    auto reply = conn.request(subjects.query_scores(), body, 2000);
    REQUIRE(reply.ok());
    return Json::parse(reply.value().data());
  };
  CHECK(ask(R"({"local_hashes":[1,2]})").contains("scores"));
  for (const char* bad : {R"({"local_hashes":[1]}x)", R"({"local_hashes":[1)", R"({"local_hashes":[1,2,3,4,5]})",
                          R"({"token_ids":[1]})", R"({"local_hashes":[-1]})", R"({"local_hashes":"x"})",
                          R"({"local_hashes":[1],"early_exit":3})", R"({"token_ids":[1],"block_size":0})"}) {
    CAPTURE(bad);
    CHECK(ask(bad).at("error").at("code") == "bad_request");
  }
  const std::string metrics = service.render_metrics();
  CHECK(metrics.find(R"(kvidx_queries_rejected_total{reason="bad_json"} 2)") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_queries_rejected_total{reason="limit"} 1)") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_queries_rejected_total{reason="missing_field"} 1)") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_queries_rejected_total{reason="wrong_type"} 3)") != std::string::npos);
  CHECK(metrics.find(R"(kvidx_queries_rejected_total{reason="invalid_value"} 1)") != std::string::npos);
  auto stats = admin_stats(conn);
  REQUIRE(stats.has_value());
  CHECK(stats->at("queries_rejected") == 8);
  CHECK(stats->at("queries_rejected_by_reason") ==
        Json{{"bad_json", 2}, {"limit", 1}, {"missing_field", 1}, {"wrong_type", 3}, {"invalid_value", 1}});
}

TEST_CASE(
    "hostile: a dead letter over the server's max_payload is published truncated and counted as published, "
    "one that cannot be published at all is counted as a failure") {
  {
    NatsServer server(testing::NatsServerOptions::with_max_payload(4096));
    bus::ServiceConfig config;
    config.nats_url = server.url();
    config.durable = "truncated";
    config.snapshot_interval = std::chrono::milliseconds(0);
    bus::KvidxService service(config);
    REQUIRE(service.start().ok());
    bus::Connection conn = connect_to(server);
    DeadLetterInbox inbox(conn);
    auto js = bus::JetStream::create(conn);
    REQUIRE(js.ok());
    std::string bad = R"({"worker_id":-1,"event":{"event_id":0,"data":"cleared"}})";
    bad.append(4000 - bad.size(), ' ');  // fits max_payload alone, not with the dead letter's headers
    REQUIRE(js.value().publish("kv.events.1", bad).ok());
    auto last = js.value().publish("kv.events.1", encode_router_event(testing::make_store_event(1, {1})));
    REQUIRE(last.ok());
    REQUIRE(service.wait_for_acked_sequence(last.value().sequence, std::chrono::seconds(20)));
    const auto letters = inbox.wait_for(1);
    REQUIRE(letters.size() == 1);
    CHECK(letters[0].reason == "decode: worker_id: expected an unsigned 64-bit integer, got negative integer");
    REQUIRE(letters[0].truncated.has_value());
    CHECK(*letters[0].truncated == "4000");
    CHECK(letters[0].body.size() < bad.size());
    CHECK(letters[0].body.size() > 3500);
    CHECK(letters[0].body == bad.substr(0, letters[0].body.size()));
    CHECK(service.stats().dead_letters == 1);
    const std::string metrics = service.render_metrics();
    CHECK(metrics.find("kvidx_dead_letters_total 1") != std::string::npos);
    CHECK(metrics.find("kvidx_dead_letters_truncated_total 1") != std::string::npos);
    CHECK(metrics.find(R"(kvidx_dead_letter_failures_total{reason="too_large"} 0)") != std::string::npos);
    auto admin = admin_stats(conn);
    REQUIRE(admin.has_value());
    CHECK(admin->at("dead_letters") == 1);
    CHECK(admin->at("dead_letters_truncated") == 1);
    CHECK(admin->at("dead_letter_failures") == 0);
  }
  {
    // A server whose max_payload is smaller than the dead letter's headers: nothing can be
    // published, so nothing is counted as published; the failure is counted and logged instead.
    NatsServer server(testing::NatsServerOptions::with_max_payload(128));
    bus::ServiceConfig config;
    config.nats_url = server.url();
    config.mode = bus::IngestMode::core;
    config.durable = "tiny";
    config.snapshot_interval = std::chrono::milliseconds(0);
    bus::KvidxService service(config);
    REQUIRE(service.start().ok());
    bus::Connection conn = connect_to(server);
    DeadLetterInbox inbox(conn);
    REQUIRE(conn.publish("kv.events.1", R"({"worker_id":-1,"event":{"event_id":0,"data":"cleared"}})").ok());
    REQUIRE(conn.flush().ok());
    const std::string failed = R"(kvidx_dead_letter_failures_total{reason="too_large"} 1)";
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline && service.render_metrics().find(failed) == std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(inbox.wait_for(0).empty());
    CHECK(service.stats().dead_letters == 0);
    CHECK(service.render_metrics().find(failed) != std::string::npos);
    CHECK(service.healthy());
  }
}
}  // TEST_SUITE("hostile")
