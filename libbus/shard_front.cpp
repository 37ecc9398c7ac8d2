#include "libbus/shard_front.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <vector>

#include "libbus/chunked_reply.h"
#include "libbus/log_rate_limiter.h"
#include "libbus/metrics.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_url.h"
#include "libbus/shard_scatter.h"
#include "libbus/subjects.h"

namespace kvidx::bus {

using Clock = std::chrono::steady_clock;

struct ShardFront::Impl {
  FrontConfig config;
  Subjects subjects;
  MetricsRegistry metrics;
  Counter* answered = nullptr;  // merged replies sent
  Counter* failed = nullptr;    // error replies (a shard's error, or a shard not answering)
  Counter* admin_refused = nullptr;
  Counter* shard_retries = nullptr;
  Histogram* latency = nullptr;
  LogRateLimiter warnings;
  Connection conn;  // NOTE: declared before scatter and subs: destroyed after them
  std::unique_ptr<ShardScatter> scatter;
  std::vector<Subscription> subs;
  std::atomic<bool> stopped{false};

  explicit Impl(FrontConfig c) : config(std::move(c)), subjects(config.subject_prefix) {
    answered = &metrics.counter("kvidx_front_queries_total", "Score queries answered by the front", {{"result", "ok"}});
    failed =
        &metrics.counter("kvidx_front_queries_total", "Score queries answered by the front", {{"result", "error"}});
    admin_refused = &metrics.counter("kvidx_front_admin_refused_total",
                                     "kv.admin.stats/workers/dump requests answered with where to ask instead");
    shard_retries = &metrics.counter("kvidx_front_shard_retries_total",
                                     "Shard requests sent again after no answer in time (a replica died holding one)");
    latency = &metrics.histogram("kvidx_front_query_duration_seconds",
                                 "Score query latency at the front (scatter, the slowest shard, merge)",
                                 latency_buckets_seconds());
  }

  void reply(const Message& request, std::string_view body) {
    auto sent = send_reply(conn, request, body, request.subject());
    if (!sent.ok()) {
      if (const auto v = warnings.admit("reply_failure"); v.log) {
        spdlog::warn("reply on {} failed: {}{}", request.subject(), sent.error().message, suppressed_note(v));
      }
    }
  }

  void on_scores(Message msg) {
    if (msg.reply().empty()) return;
    auto request = std::make_shared<Message>(std::move(msg));
    const auto t0 = Clock::now();
    // NOTE: the body goes to the shards as it came: they validate it (and reject a bad one alike).
    scatter->query(std::string(request->data()), [this, request, t0](ScatterOutcome outcome) {
      if (outcome.ok()) {
        reply(*request, outcome.value());
        answered->inc();
      } else {
        const ErrorReply& error = outcome.error();
        if (error.code != "bad_request") {
          if (const auto v = warnings.admit("shard_" + error.code); v.log) {
            spdlog::warn("score query failed: {}: {}{}", error.code, error.message, suppressed_note(v));
          }
        }
        reply(*request, encode_error_reply(error));
        failed->inc();
      }
      latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
    });
  }

  void on_admin(const Message& msg) {
    const std::string_view subject = msg.subject();
    // NOTE: remove_worker and replicas reach every shard on their own (plain subscriptions).
    if (subject == subjects.admin_remove_worker() || subject == subjects.admin_replicas()) return;
    admin_refused->inc();
    reply(msg, encode_error_reply(
                   {"sharded", fmt::format("{} is answered per shard in a sharded deployment ({} shards): ask shard I "
                                           "on {}.shard.I.admin.* (kvidx stats --shard I/{}), or every replica of "
                                           "every shard at once (kvidx stats --all)",
                                           subject, config.shards, subjects.prefix(), config.shards)}));
  }
};

ShardFront::ShardFront(FrontConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

ShardFront::~ShardFront() { stop(); }

BusStatus ShardFront::start() {
  Impl& d = *impl_;
  ConnectionOptions options;
  options.url = d.config.nats_url;
  options.auth = d.config.nats_auth;
  options.name = "kvidx-front";
  options.send_asap = true;  // a responder: ~0.3 ms per request instead of ~1.1 ms
  auto conn = Connection::connect(options);
  if (!conn.ok()) return conn.error();
  d.conn = std::move(conn).value();
  auto scatter = ShardScatter::start(
      d.conn, d.subjects,
      ScatterOptions{d.config.shards, d.config.shard_timeout, d.config.shard_retries, d.shard_retries});
  if (!scatter.ok()) return scatter.error();
  d.scatter = std::move(scatter).value();
  auto scores =
      d.conn.queue_subscribe(d.subjects.query_scores(), kQueueGroup, [&d](Message m) { d.on_scores(std::move(m)); });
  if (!scores.ok()) return scores.error();
  d.subs.push_back(std::move(scores).value());
  auto admin = d.conn.queue_subscribe(d.subjects.admin_wildcard(), kQueueGroup, [&d](Message m) { d.on_admin(m); });
  if (!admin.ok()) return admin.error();
  d.subs.push_back(std::move(admin).value());
  if (auto s = d.conn.flush(); !s.ok()) return s;
  spdlog::info(
      "kvidx front serving {} for {} shards ({}.shard.<0..{}>.query.scores), shard timeout {} ms, {} retries, {}",
      d.subjects.query_scores(), d.config.shards, d.subjects.prefix(), d.config.shards - 1,
      d.config.shard_timeout.count(), d.config.shard_retries, redact_url(d.config.nats_url));
  return {};
}

void ShardFront::stop() {
  Impl& d = *impl_;
  if (d.stopped.exchange(true)) return;
  d.subs.clear();
  d.scatter.reset();  // answers what is still in flight with an error
  // NOTE: the connection stays open until the front is destroyed: healthy() may read it meanwhile.
  if (d.conn.valid()) d.conn.flush(1000);
}

bool ShardFront::healthy() const { return !impl_->stopped.load() && impl_->conn.valid() && !impl_->conn.closed(); }

MetricsRegistry& ShardFront::metrics() { return impl_->metrics; }

std::string ShardFront::render_metrics() const { return impl_->metrics.render(); }

}  // namespace kvidx::bus
