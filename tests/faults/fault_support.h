// Helpers of the fault-injection tests: the built `kvidx serve` binary as a child process (stopped
// by PID), its stats and dump over NATS request/reply, deterministic per-stream event histories,
// the offline sequential apply they are compared to, and /proc RSS readings. Everything talks to
// a NatsServer fixture on 127.0.0.1; every wait is bounded in time. Definitions live in
// fault_support.cpp, compiled once for every fault test.
#pragma once

#include <doctest/doctest.h>
#include <sys/types.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/subjects.h"
#include "libcodec/event_codec.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/child_process.h"
#include "tests/support/event_builders.h"
#include "tests/support/event_histories.h"
#include "tests/support/nats_server.h"

namespace kvidx::faults {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using testing::Histories;

using testing::BlockKey;
using testing::branching_histories;
using testing::branching_history;
using testing::interleave;
using testing::normal_form;

struct OfflineResult {
  std::set<BlockKey> form;
  ShardSizes sizes;
};

// The reference: every event applied in order on one lane.
OfflineResult offline_apply(const std::vector<const RouterEvent*>& events);

bus::Connection connect_to(const testing::NatsServer& server);

// The events stream exactly as `kvidx serve` declares it (so tests can publish before it runs).
void ensure_events_stream(bus::Connection& conn);
std::uint64_t stream_last_sequence(bus::Connection& conn);

// VmRSS of a process in KiB (0 when it cannot be read).
std::uint64_t rss_kib(pid_t pid);

// `kvidx serve` as a child process against `server`, metrics off, logs in `dir`.
class ServeProcess {
 public:
  ServeProcess(const testing::NatsServer& server, const testing::TempDir& dir, const std::string& durable,
               std::vector<std::string> extra = {}, bool default_flags = true);
  // Against `nats_urls` (one URL or a comma-separated list: a cluster).
  ServeProcess(const std::string& nats_urls, const testing::TempDir& dir, const std::string& durable,
               std::vector<std::string> extra = {}, bool default_flags = true);
  pid_t pid() const { return child_->pid(); }
  bool running() { return child_->running(); }
  int stop(int signo = 15) { return child_->stop(signo); }
  // stdout (spdlog) then stderr.
  std::string log() const;

 private:
  static inline int starts_ = 0;
  std::string log_;
  std::unique_ptr<testing::ChildProcess> child_;
};

// Every attached node holds a block of some stream or awaits cleanup (a dead branch stays attached
// until the tree's next cleanup run), so: nodes <= blocks + blocks_pending_cleanup + 1 (the root).
// Node counts themselves depend on the split history (a restored tree is built compact).
bool nodes_within_bound(const Json& stats);

// kv.admin.stats of a running kvidx (nullopt when nothing answers within `timeout_ms`); `body`
// {"digest":"total"} adds the index digest.
std::optional<Json> admin_stats(bus::Connection& conn, std::int64_t timeout_ms = 1000, const std::string& body = "{}");

// Waits until kvidx answers stats (it subscribes to queries after the restore and the consumer).
Json wait_ready(bus::Connection& conn, ServeProcess& serve, std::chrono::seconds timeout = std::chrono::seconds(30));
// Waits until kvidx has acknowledged the stream up to `sequence`; returns its last stats.
Json wait_acked(bus::Connection& conn, ServeProcess& serve, std::uint64_t sequence,
                std::chrono::seconds timeout = std::chrono::seconds(60));

// The whole index of a running kvidx over the chunked kv.admin.dump protocol.
std::vector<RouterEvent> admin_dump(bus::Connection& conn);

// JetStream publish that rides out a server outage: retries the same message (bounded by
// `deadline`) until the server acknowledges it. A retried message may be stored twice; kvidx
// skips the second copy as a duplicate event_id.
std::uint64_t publish_retrying(bus::JetStream& js, const std::string& subject, const std::string& body,
                               Clock::time_point deadline, int* retries = nullptr);

}  // namespace kvidx::faults
