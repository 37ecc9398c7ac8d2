#include "tests/faults/fault_support.h"
#include "tests/support/nats_client.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <thread>

#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "tests/support/event_builders.h"

namespace kvidx::faults {

OfflineResult offline_apply(const std::vector<const RouterEvent*>& events) {
  LaneIndexer offline(1);
  for (const RouterEvent* e : events) REQUIRE(offline.enqueue_event(*e) == IndexerStatus::ok);
  auto dump = offline.dump_events();
  REQUIRE(dump.has_value());
  return {normal_form(*dump), offline.shard_sizes()};
}

bus::Connection connect_to(const testing::NatsServer& server) {
  return testing::connect_to(server, "kvidx-faults-test");
}

void ensure_events_stream(bus::Connection& conn) {
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  REQUIRE(js.value().ensure_stream(bus::StreamSpec{"KV_EVENTS", {"kv.events.>"}, true, 0, 0, 0}).ok());
}

std::uint64_t stream_last_sequence(bus::Connection& conn) {
  auto js = bus::JetStream::create(conn);
  REQUIRE(js.ok());
  auto state = js.value().stream_state("KV_EVENTS");
  REQUIRE_MESSAGE(state.ok(), state.error().message);
  return state.value().last_sequence;
}

std::uint64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

ServeProcess::ServeProcess(const testing::NatsServer& server, const testing::TempDir& dir, const std::string& durable,
                           std::vector<std::string> extra, bool default_flags)
    : ServeProcess(server.url(), dir, durable, std::move(extra), default_flags) {}

ServeProcess::ServeProcess(const std::string& nats_urls, const testing::TempDir& dir, const std::string& durable,
                           std::vector<std::string> extra, bool default_flags) {
  std::vector<std::string> args = {testing::built_binary("kvidx"), "--log-level", "warn", "serve"};
  if (default_flags) args.insert(args.end(), {"--nats", nats_urls, "--metrics", "off", "--durable", durable});
  args.insert(args.end(), extra.begin(), extra.end());
  log_ = dir.file("serve-" + durable + "-" + std::to_string(++starts_) + ".log");
  child_ = std::make_unique<testing::ChildProcess>(args, log_);
}

std::string ServeProcess::log() const {
  std::stringstream ss;
  for (const std::string& path : {log_, log_ + ".err"}) {
    std::ifstream in(path);
    ss << in.rdbuf();
  }
  return ss.str();
}

bool nodes_within_bound(const Json& stats) {
  const auto nodes = stats.at("nodes").get<std::uint64_t>();
  const auto bound =
      stats.at("blocks").get<std::uint64_t>() + stats.at("blocks_pending_cleanup").get<std::uint64_t>() + 1;
  if (nodes <= bound) return true;
  MESSAGE("nodes " << nodes << " exceed blocks + blocks_pending_cleanup + 1 = " << bound);
  return false;
}

std::optional<Json> admin_stats(bus::Connection& conn, std::int64_t timeout_ms, const std::string& body) {
  auto reply = conn.request(bus::Subjects().admin_stats(), body, timeout_ms);
  if (!reply.ok()) return std::nullopt;
  return Json::parse(reply.value().data());
}

Json wait_ready(bus::Connection& conn, ServeProcess& serve, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    REQUIRE_MESSAGE(serve.running(), "kvidx serve exited: " << serve.log());
    if (auto s = admin_stats(conn, 500)) return *s;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("kvidx serve not ready in time: " << serve.log());
  return {};
}

Json wait_acked(bus::Connection& conn, ServeProcess& serve, std::uint64_t sequence, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Json last;
  while (Clock::now() < deadline) {
    REQUIRE_MESSAGE(serve.running(), "kvidx serve exited: " << serve.log());
    if (auto s = admin_stats(conn, 1000)) {
      last = *s;
      if (last.at("acked_sequence").get<std::uint64_t>() >= sequence) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("acked sequence did not reach " << sequence << "; last stats " << last.dump() << "\n" << serve.log());
  return last;
}

std::vector<RouterEvent> admin_dump(bus::Connection& conn) {
  const std::string inbox = conn.new_inbox();
  auto sub = conn.subscribe_sync(inbox);
  REQUIRE(sub.ok());
  REQUIRE(sub.value().set_unlimited_pending().ok());
  auto request = bus::Message::create(bus::Subjects().admin_dump(), "{}", inbox);
  REQUIRE(request.ok());
  REQUIRE(conn.publish(request.value()).ok());
  std::vector<RouterEvent> events;
  for (int chunk = 0; chunk < 100000; ++chunk) {
    auto msg = sub.value().next(10000);
    REQUIRE_MESSAGE(msg.ok(), msg.error().message);
    if (msg.value().header("Kvidx-Dump") == std::string("end")) {
      const Json end = Json::parse(msg.value().data());
      REQUIRE_MESSAGE(end.contains("end"), end.dump());
      CHECK(end.at("events") == events.size());
      return events;
    }
    std::string_view rest = msg.value().data();
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      auto e = decode_router_event(rest.substr(0, nl));
      REQUIRE_MESSAGE(e.ok(), e.error().message());
      events.push_back(std::move(e).value());
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  FAIL("dump did not end");
  return events;
}

std::uint64_t publish_retrying(bus::JetStream& js, const std::string& subject, const std::string& body,
                               Clock::time_point deadline, int* retries) {
  while (true) {
    auto ack = js.publish(subject, body);
    if (ack.ok()) return ack.value().sequence;
    REQUIRE_MESSAGE(Clock::now() < deadline, "publish kept failing: " << ack.error().message);
    if (retries) ++*retries;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace kvidx::faults
