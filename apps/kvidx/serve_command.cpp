// kvidx serve: the NATS ingestion service (libbus/service.h) plus HTTP /metrics, /healthz and /readyz, and
// optionally vLLM / SGLang engines' ZMQ KV-event sockets bridged in-process (--zmq SPEC, repeatable:
// bridge/zmq_source_spec.h, bridge/in_process_bridges.h) into the same ingestion path.
// Flags may also come from a config file: `kvidx serve --config kvidx.toml` (CLI11 TOML/INI,
// keys named like the long flags, e.g. `nats = "nats://..."`, `lanes = 8`, `subject = ["a.>"]`).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/interrupt.h"
#include "apps/kvidx/nats_flags.h"
#include "bridge/in_process_bridges.h"
#include "bridge/zmq_source_spec.h"
#include "libbus/http_server.h"
#include "libbus/metrics.h"
#include "libbus/nats_url.h"
#include "libbus/service.h"
#include "libbus/shard_front.h"
#include "libbus/shard_spec.h"
#include "libbus/subjects.h"
#include "libindexer/lanes/prune_config.h"
#include "replay/event_log_reader.h"

namespace kvidx::cli {
namespace {

struct ServeFlags {
  NatsFlags nats;  // add_nats_options
  std::string mode = "jetstream";
  std::size_t lanes = 4;
  std::string subject_prefix = "kv";
  std::vector<std::string> subjects;
  std::string metrics = "127.0.0.1:9464";
  std::string snapshot_interval = "30s";
  std::string snapshot_stale_after = "auto";
  std::string durable = "kvidx";
  std::string stream = "KV_EVENTS";
  std::string snapshot_stream = "KV_SNAPSHOTS";
  int stream_replicas = 0;  // 0: automatic (libbus/stream_replicas.h)
  int fetch_batch = 1000;
  std::size_t max_inflight = 1u << 17;
  bool clear_on_gap = false;
  bool no_restore = false;
  // Input limits (DecodeLimits for event messages, QueryLimits for score queries).
  std::size_t max_message_bytes = DecodeLimits{}.max_message_bytes;
  std::size_t max_blocks_per_event = DecodeLimits{}.max_blocks_per_event;
  std::size_t max_events_per_message = DecodeLimits{}.max_events_per_batch;
  std::size_t max_query_hashes = QueryLimits{}.max_hashes;
  std::size_t max_streams = bus::ServiceConfig{}.max_streams;  // distinct (worker, rank) streams; 0: unlimited
  // Approximate mode: index routing decisions with a TTL (off unless --approximate).
  bool approximate = false;
  std::string approximate_ttl = "120s";
  std::size_t max_tree_size = PruneConfig{}.max_tree_size;
  double prune_target_ratio = PruneConfig{}.prune_target_ratio;
  // Retention of the events stream (0: unlimited).
  std::string stream_max_age = "0";
  std::int64_t stream_max_bytes = 0;
  bool check_config = false;
  std::string config_file;
  // Weights of the storage tiers in combined_scores (libindexer/tier_scores.h); unnamed tiers keep
  // their default.
  std::string tier_weights = format_tier_weights(TierWeights{});
  // In-process ZMQ sources (bridge/zmq_source_spec.h), one per engine socket.
  std::vector<std::string> zmq_sources;
  // Shards (libbus/shard_spec.h): this instance is shard I/N, or the merging front of N shards.
  std::string shard;
  std::uint32_t front = 0;  // 0: not a front
  std::string shard_timeout = "2s";
  int shard_retries = 2;
};

// "30s", "500ms", "2m", "0" -> milliseconds; nullopt when malformed.
std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
  std::size_t pos = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (value < 0) return std::nullopt;
  const std::string unit = text.substr(pos);
  if (unit == "ms") return std::chrono::milliseconds(value);
  if (unit == "s" || (unit.empty() && value == 0)) return std::chrono::milliseconds(value * 1000);
  if (unit == "m") return std::chrono::milliseconds(value * 60'000);
  if (unit == "h") return std::chrono::milliseconds(value * 3'600'000);
  return std::nullopt;
}

constexpr std::chrono::seconds kZmqReportInterval{60};

void log_zmq_stats(const bridge::InProcessBridges& bridges) {
  const auto stats = bridges.stats();
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const auto& s = stats[i];
    spdlog::info(
        "zmq {}: {} batches -> {} events; gaps {} (missing {}, replayed {}, lost {}), restarts {}, "
        "malformed {}, refused {}, dropped stored: {} block size, {} empty, {} unreadable extra_keys",
        bridges.sources()[i].endpoint, s.batches_delivered, s.router_events, s.gaps, s.missing_batches,
        s.replayed_batches, s.unrecovered_batches, s.restarts, s.malformed_frames, s.sink_failures,
        s.conversion.block_size_mismatches, s.conversion.empty_stores_dropped, s.conversion.extra_keys_unreadable);
  }
}

// Serves /metrics, /healthz and /readyz on `spec` ("HOST:PORT") with `metrics`, `healthy` and
// `ready` (nullptr: /readyz as /healthz). Returns nullptr and prints the error when it cannot listen.
std::unique_ptr<bus::HttpServer> start_http(const std::string& spec, const std::string& host, std::uint16_t port,
                                            bus::MetricsRegistry& registry, std::function<std::string()> metrics,
                                            std::function<bool()> healthy, std::function<bus::Readiness()> ready) {
  bus::HttpServerOptions http_options;
  http_options.accept_errors = &registry.counter(
      "kvidx_http_accept_errors_total", "Failed accepts on the /metrics listener (e.g. out of file descriptors)");
  auto http = std::make_unique<bus::HttpServer>(
      [metrics = std::move(metrics), healthy = std::move(healthy), ready = std::move(ready)](std::string_view,
                                                                                             std::string_view target) {
        const std::string_view path = target.substr(0, target.find('?'));
        if (path == "/metrics") {
          return bus::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics()};
        }
        // /healthz is liveness (restart me if it fails): alive while starting, catching up or with
        // failing snapshots. /readyz is readiness (send me traffic): see bus::Readiness.
        if (path == "/healthz") {
          return healthy() ? bus::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}
                           : bus::HttpResponse{503, "text/plain; charset=utf-8", "unhealthy\n"};
        }
        if (path == "/readyz") {
          const bus::Readiness r = ready ? ready() : bus::Readiness{healthy(), healthy() ? "" : "unhealthy", false};
          return r.ready ? bus::HttpResponse{200, "text/plain; charset=utf-8", "ready\n"}
                         : bus::HttpResponse{503, "text/plain; charset=utf-8", "not ready: " + r.reason + "\n"};
        }
        return bus::HttpResponse{404, "text/plain; charset=utf-8", "not found\n"};
      },
      http_options);
  // NOTE: only /metrics renders this gauge, on the server's own thread, so `server` outlives it.
  registry.gauge_callback("kvidx_http_connections", "Open connections on the /metrics listener", {},
                          [server = http.get()] { return static_cast<double>(server->open_connections()); });
  std::string error;
  if (!http->start(host, port, error)) {
    std::fprintf(stderr, "kvidx: error: cannot serve metrics on %s: %s\n", spec.c_str(), error.c_str());
    return nullptr;
  }
  spdlog::info("metrics on http://{}:{}/metrics", host, http->port());
  return http;
}

// `kvidx serve --front N`: the merging front of N shards (libbus/shard_front.h); indexes nothing.
int run_front(const ServeFlags& flags, const bus::ConnectionOptions& connection, bool serve_metrics,
              const std::string& metrics_host, std::uint16_t metrics_port, std::chrono::milliseconds shard_timeout) {
  bus::FrontConfig config;
  config.nats_url = connection.url;
  config.nats_auth = connection.auth;
  config.subject_prefix = flags.subject_prefix;
  config.shards = flags.front;
  config.shard_timeout = shard_timeout;
  config.shard_retries = flags.shard_retries;
  if (flags.check_config) {
    std::printf(
        "config ok: front of %u shards: nats %s (auth: %s), prefix '%s', metrics %s, shard timeout %lld ms, "
        "%d shard retries\n",
        config.shards, bus::redact_url(config.nats_url).c_str(), bus::describe_auth(config.nats_auth).c_str(),
        config.subject_prefix.c_str(), flags.metrics.c_str(), static_cast<long long>(shard_timeout.count()),
        config.shard_retries);
    return kExitOk;
  }
  install_interrupt_handlers();
  bus::ShardFront front(config);
  std::unique_ptr<bus::HttpServer> http;
  if (serve_metrics) {
    http = start_http(
        flags.metrics, metrics_host, metrics_port, front.metrics(), [&front] { return front.render_metrics(); },
        [&front] { return front.healthy(); }, nullptr);
    if (!http) return kExitFailure;
  }
  if (auto started = front.start(); !started.ok()) {
    std::fprintf(stderr, "kvidx serve: %s\n", connect_failure(started.error(), config.nats_url).c_str());
    return exit_code_for(started.error());
  }
  while (!interrupted().load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  spdlog::info("shutting down the front");
  front.stop();
  if (http) http->stop();
  return kExitOk;
}

int run_serve(const ServeFlags& flags) {
  bus::ServiceConfig config;
  {
    bus::ConnectionOptions connection;
    // NOTE: --check-config validates a deployment's config where its secret files may not exist.
    if (std::string error; const int code = resolve_nats(flags.nats, connection, error, !flags.check_config)) {
      std::fprintf(stderr, "kvidx serve: %s\n", error.c_str());
      return code;
    }
    config.nats_url = connection.url;
    config.nats_auth = connection.auth;
    if (flags.front > 0) {
      if (!flags.shard.empty()) {
        std::fprintf(stderr,
                     "kvidx: error: --front and --shard exclude each other: a front indexes nothing, it asks "
                     "the shards\n");
        return kExitUsage;
      }
      const auto timeout = parse_duration(flags.shard_timeout);
      if (!timeout || timeout->count() == 0) {
        std::fprintf(stderr, "kvidx: error: bad --shard-timeout '%s' (e.g. 2s, 500ms)\n", flags.shard_timeout.c_str());
        return kExitUsage;
      }
      std::string host;
      std::uint16_t port = 0;
      const bool metrics_on = !flags.metrics.empty() && flags.metrics != "off";
      if (metrics_on && !bus::parse_host_port(flags.metrics, host, port)) {
        std::fprintf(stderr, "kvidx: error: bad --metrics '%s' (expected HOST:PORT or off)\n", flags.metrics.c_str());
        return kExitUsage;
      }
      return run_front(flags, connection, metrics_on, host, port, *timeout);
    }
  }
  if (!flags.shard.empty()) {
    auto shard = bus::parse_shard_spec(flags.shard);
    if (!shard.ok()) {
      std::fprintf(stderr, "kvidx: error: %s\n", shard.error().message.c_str());
      return kExitUsage;
    }
    if (!flags.subjects.empty()) {
      std::fprintf(stderr,
                   "kvidx: error: --subject cannot be combined with --shard: events on other subjects carry their "
                   "worker id only in the payload, so NATS cannot route them to a shard (publish on %s.events.<id>)\n",
                   flags.subject_prefix.c_str());
      return kExitUsage;
    }
    config.shard = shard.value();
  }
  if (flags.mode == "jetstream")
    config.mode = bus::IngestMode::jetstream;
  else if (flags.mode == "core")
    config.mode = bus::IngestMode::core;
  else {
    std::fprintf(stderr, "kvidx: error: --mode must be jetstream or core, got '%s'\n", flags.mode.c_str());
    return kExitUsage;
  }
  const auto interval = parse_duration(flags.snapshot_interval);
  if (!interval) {
    std::fprintf(stderr, "kvidx: error: bad --snapshot-interval '%s' (e.g. 30s, 500ms, 0)\n",
                 flags.snapshot_interval.c_str());
    return kExitUsage;
  }
  for (const auto& subject : flags.subjects) {
    if (!bus::is_valid_subject(subject)) {
      std::fprintf(stderr, "kvidx: error: bad --subject '%s'\n", subject.c_str());
      return kExitUsage;
    }
  }
  if (flags.durable.find('.') != std::string::npos || flags.durable.empty()) {
    std::fprintf(stderr, "kvidx: error: --durable must be non-empty and contain no '.'\n");
    return kExitUsage;
  }
  std::chrono::milliseconds stale_after{0};
  if (flags.snapshot_stale_after != "auto") {
    const auto parsed = parse_duration(flags.snapshot_stale_after);
    if (!parsed || parsed->count() == 0) {
      std::fprintf(stderr, "kvidx: error: bad --snapshot-stale-after '%s' (e.g. 90s, 5m, or auto)\n",
                   flags.snapshot_stale_after.c_str());
      return kExitUsage;
    }
    stale_after = *parsed;
  }
  const auto ttl = parse_duration(flags.approximate_ttl);
  const auto max_age = parse_duration(flags.stream_max_age);
  if (!ttl || !max_age) {
    std::fprintf(stderr, "kvidx: error: bad duration in --approximate-ttl '%s' or --stream-max-age '%s'\n",
                 flags.approximate_ttl.c_str(), flags.stream_max_age.c_str());
    return kExitUsage;
  }
  if (flags.approximate) {
    PruneConfig prune;
    prune.ttl = *ttl;
    prune.max_tree_size = flags.max_tree_size;
    prune.prune_target_ratio = flags.prune_target_ratio;
    if (auto problem = prune.validate()) {
      std::fprintf(stderr, "kvidx: error: approximate mode: %s\n", problem->c_str());
      return kExitUsage;
    }
    config.approximate = prune;
  }
  config.stream_max_age = *max_age;
  config.stream_max_bytes = flags.stream_max_bytes;
  config.lanes = flags.lanes;
  config.subject_prefix = flags.subject_prefix;
  config.extra_subjects = flags.subjects;
  config.stream = flags.stream;
  config.durable = flags.durable;
  config.snapshot_stream = flags.snapshot_stream;
  config.stream_replicas = flags.stream_replicas;
  config.snapshot_interval = *interval;
  config.snapshot_stale_after = stale_after;
  config.fetch_batch = flags.fetch_batch;
  config.max_inflight_events = flags.max_inflight;
  config.clear_on_gap = flags.clear_on_gap;
  config.restore_snapshot = !flags.no_restore;
  config.limits.max_message_bytes = flags.max_message_bytes;
  config.limits.max_blocks_per_event = flags.max_blocks_per_event;
  config.limits.max_events_per_batch = flags.max_events_per_message;
  config.query_limits.max_message_bytes = flags.max_message_bytes;
  config.query_limits.max_hashes = flags.max_query_hashes;
  config.max_streams = flags.max_streams;
  {
    std::string error;
    const auto weights = parse_tier_weights(flags.tier_weights, error);
    if (!weights) {
      std::fprintf(stderr, "kvidx: error: bad --tier-weights '%s': %s\n", flags.tier_weights.c_str(), error.c_str());
      return kExitUsage;
    }
    config.tier_weights = *weights;
  }
  // Validated before --check-config returns, used once the service runs.
  const bool serve_metrics = !flags.metrics.empty() && flags.metrics != "off";
  std::string metrics_host;
  std::uint16_t metrics_port = 0;
  if (serve_metrics && !bus::parse_host_port(flags.metrics, metrics_host, metrics_port)) {
    std::fprintf(stderr, "kvidx: error: bad --metrics '%s' (expected HOST:PORT or off)\n", flags.metrics.c_str());
    return kExitUsage;
  }
  std::vector<bridge::ZmqBridgeConfig> zmq_sources;
  for (const std::string& spec : flags.zmq_sources) {
    auto source = bridge::parse_zmq_source_spec(spec);
    if (!source) {
      std::fprintf(stderr, "kvidx: error: bad --zmq '%s': %s\n", spec.c_str(), source.error().message().c_str());
      return kExitUsage;
    }
    if (config.shard) {
      const WorkerId worker = source.value().conversion.worker_id;
      if (const auto home = bus::shard_of_worker(worker, config.shard->count); home != config.shard->index) {
        std::fprintf(stderr,
                     "kvidx: error: --zmq '%s': worker %llu belongs to shard %u of %u, not to this shard %s: bridge "
                     "it on that shard\n",
                     spec.c_str(), static_cast<unsigned long long>(worker), home, config.shard->count,
                     bus::to_string(*config.shard).c_str());
        return kExitUsage;
      }
    }
    zmq_sources.push_back(std::move(source).value());
  }
  if (flags.check_config) {
    // NOTE: parse and validate only (deployment checks, e.g. the docker-compose config): no NATS.
    std::printf(
        "config ok: nats %s (auth: %s), mode %s, %zu lanes, prefix '%s', durable '%s', metrics %s, "
        "max message bytes %zu, max blocks per event %zu, max events per message %zu, max query hashes %zu, "
        "max streams %s, tier weights %s, %zu zmq sources, stream replicas %s\n",
        bus::redact_url(config.nats_url).c_str(), bus::describe_auth(config.nats_auth).c_str(), flags.mode.c_str(),
        config.lanes, config.subject_prefix.c_str(), config.durable.c_str(), flags.metrics.c_str(),
        config.limits.max_message_bytes, config.limits.max_blocks_per_event, config.limits.max_events_per_batch,
        config.query_limits.max_hashes,
        config.max_streams == 0 ? "unlimited" : std::to_string(config.max_streams).c_str(),
        format_tier_weights(config.tier_weights).c_str(), zmq_sources.size(),
        config.stream_replicas == 0 ? "auto" : std::to_string(config.stream_replicas).c_str());
    for (const auto& source : zmq_sources) std::printf("  zmq %s\n", bridge::describe_zmq_source(source).c_str());
    if (config.shard) {
      const bus::Subjects subjects(config.subject_prefix, config.shard);
      std::printf("  shard %s: events %s, queries %s; the NATS server needs: %s\n",
                  bus::to_string(*config.shard).c_str(), subjects.events_filter().c_str(),
                  subjects.query_scores().c_str(),
                  bus::shard_mapping_config(config.subject_prefix, config.shard->count).c_str());
    }
    return kExitOk;
  }

  install_interrupt_handlers();
  bus::KvidxService service(config);

  std::unique_ptr<bus::HttpServer> http;
  if (serve_metrics) {
    http = start_http(
        flags.metrics, metrics_host, metrics_port, service.metrics(), [&service] { return service.render_metrics(); },
        [&service] { return service.healthy(); }, [&service] { return service.readiness(); });
    if (!http) return kExitFailure;
  }

  if (auto started = service.start(); !started.ok()) {
    std::fprintf(stderr, "kvidx serve: %s\n", connect_failure(started.error(), config.nats_url).c_str());
    return exit_code_for(started.error());
  }
  // NOTE: the bridges start once the service runs (it refuses local events before) and stop before
  // it does, so every batch they converted is dispatched before the lanes drain and the snapshot.
  bridge::InProcessBridges bridges(service, std::move(zmq_sources));
  if (auto started = bridges.start(); !started) {
    std::fprintf(stderr, "kvidx: error: --zmq %s\n", started.error().c_str());
    service.stop(/*final_snapshot=*/false);
    return kExitFailure;
  }
  for (const auto& source : bridges.sources()) spdlog::info("zmq source {}", bridge::describe_zmq_source(source));
  auto next_report = std::chrono::steady_clock::now() + kZmqReportInterval;
  while (!interrupted().load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!bridges.sources().empty() && std::chrono::steady_clock::now() >= next_report) {
      log_zmq_stats(bridges);
      next_report += kZmqReportInterval;
    }
  }
  spdlog::info("shutting down: {}stop pulling, drain lanes, final snapshot",
               bridges.sources().empty() ? "" : "stop the zmq sources, ");
  bridges.stop();
  if (!bridges.sources().empty()) log_zmq_stats(bridges);
  service.stop(/*final_snapshot=*/true);
  if (http) http->stop();
  const auto stats = service.stats();
  spdlog::info(
      "stopped: {} messages, {} events applied, {} duplicates, {} gaps, {} dead letters ({} could not be "
      "published), {} score queries rejected",
      stats.messages, stats.events_applied, stats.duplicates, stats.gaps, stats.dead_letters,
      stats.dead_letter_failures, stats.queries_rejected);
  return kExitOk;
}

}  // namespace

void add_serve_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<ServeFlags>();
  Command& cmd = app.add_subcommand("serve", "Consume KV events from NATS, keep the index, answer score queries");
  cmd.add_option("--config", flags->config_file, "Read serve flags from a TOML/INI file (keys: the long flags)");
  add_nats_options(cmd, flags->nats);
  cmd.add_option("--mode", flags->mode, "jetstream (durable, acked after apply) or core (best effort)")
      .capture_default_str();
  cmd.add_option("--lanes", flags->lanes, "Lane threads applying events").capture_default_str().check(InRange{1, 256});
  cmd.add_option("--subject-prefix", flags->subject_prefix, "Prefix of every kvidx subject").capture_default_str();
  cmd.add_option(
      "--subject", flags->subjects,
      "Extra event subject or wildcard (repeatable), e.g. a Dynamo kv-events subject; worker id from the payload");
  cmd.add_option("--metrics", flags->metrics,
                 "HOST:PORT for HTTP /metrics, /healthz (liveness) and /readyz (readiness), or off")
      .capture_default_str();
  cmd.add_option("--snapshot-interval", flags->snapshot_interval, "Periodic snapshot interval (30s, 500ms, 0 = off)")
      .capture_default_str();
  cmd.add_option("--snapshot-stale-after", flags->snapshot_stale_after,
                 "Not ready (/readyz 503) while the newest good snapshot is older than this (auto: 3 x "
                 "--snapshot-interval, at least 60s)")
      .capture_default_str();
  cmd.add_option("--durable", flags->durable, "JetStream durable consumer name; also names the snapshots")
      .capture_default_str();
  cmd.add_option("--stream", flags->stream, "JetStream events stream").capture_default_str();
  cmd.add_option("--snapshot-stream", flags->snapshot_stream, "JetStream stream holding snapshots")
      .capture_default_str();
  cmd.add_option("--stream-replicas", flags->stream_replicas,
                 "Copies of the events and snapshot streams on a JetStream cluster (0 = auto: 3 when 3 or more NATS "
                 "servers are known, else 1; an existing stream keeps its count unless this is set)")
      .capture_default_str()
      .check(InRange{0, 5});
  cmd.add_option("--fetch-batch", flags->fetch_batch, "Messages per JetStream fetch")
      .capture_default_str()
      .check(InRange{1, 100000});
  cmd.add_option("--max-inflight", flags->max_inflight, "Events dispatched but not yet acked before pulling pauses")
      .capture_default_str();
  cmd.add_flag("--clear-on-gap", flags->clear_on_gap, "On an event_id gap, clear that stream's blocks (re-sync)");
  cmd.add_flag("--no-restore", flags->no_restore, "Ignore saved snapshots and replay the whole stream");
  cmd.add_option("--max-message-bytes", flags->max_message_bytes,
                 "Largest event message or score query accepted (larger: dead letter / bad_request)")
      .capture_default_str()
      .check(InRange{std::size_t{64}, std::size_t{1} << 30});
  cmd.add_option("--max-blocks-per-event", flags->max_blocks_per_event,
                 "Most blocks one Stored/Removed event may carry")
      .capture_default_str()
      .check(InRange{std::size_t{1}, std::size_t{1} << 26});
  cmd.add_option("--max-events-per-message", flags->max_events_per_message, "Most events one batch message may carry")
      .capture_default_str()
      .check(InRange{std::size_t{1}, std::size_t{1} << 24});
  cmd.add_option("--max-query-hashes", flags->max_query_hashes,
                 "Most local_hashes per score query (token_ids: 64 x this)")
      .capture_default_str()
      .check(InRange{std::size_t{1}, std::size_t{1} << 26});
  cmd.add_option("--max-streams", flags->max_streams,
                 "Most distinct (worker, rank) streams; an event message adding more is dead-lettered (0 = unlimited)")
      .capture_default_str()
      .check(InRange{std::size_t{0}, std::size_t{1} << 32});
  cmd.add_flag("--approximate", flags->approximate,
               "Approximate mode: index routing decisions (<prefix>.routing.decisions) with a TTL");
  cmd.add_option("--approximate-ttl", flags->approximate_ttl, "How long a routed block stays indexed")
      .capture_default_str();
  cmd.add_option("--max-tree-size", flags->max_tree_size, "Approximate mode: blocks tracked before pruning")
      .capture_default_str();
  cmd.add_option("--prune-target-ratio", flags->prune_target_ratio, "Approximate mode: prune down to this share")
      .capture_default_str();
  cmd.add_option("--stream-max-age", flags->stream_max_age,
                 "Retention of the events stream (e.g. 24h; 0 = unlimited); keep it well above the snapshot interval")
      .capture_default_str();
  cmd.add_option("--stream-max-bytes", flags->stream_max_bytes,
                 "Retention of the events stream in bytes (0 = unlimited)")
      .capture_default_str();
  cmd.add_option("--tier-weights", flags->tier_weights,
                 "Weights of the storage tiers in a score reply's combined_scores, TIER=WEIGHT,... (tiers not "
                 "named keep their default; scores stay device-only)")
      .capture_default_str();
  cmd.add_option("--zmq", flags->zmq_sources,
                 "Bridge a vLLM / SGLang engine's ZMQ KV events in-process (repeatable, one per engine socket): "
                 "'ENDPOINT,worker=W,block-size=N[,replay=ENDPOINT][,dp-rank=R][,topic=T][,eagle][,clear-on-gap]"
                 "[,replay-timeout-ms=MS][,cache-namespace=NS]'");
  cmd.add_option("--shard", flags->shard,
                 "Be shard I of N (I/N, 0 <= I < N): index only the workers NATS routes to shard I (the server maps "
                 "<prefix>.events.* to <prefix>.events.{{partition(N,1)}}.{{wildcard(1)}}); answer on "
                 "<prefix>.shard.I.*; run a --front for kv.query.scores");
  cmd.add_option("--front", flags->front,
                 "Be the merging front of N shards: answer <prefix>.query.scores by asking every shard and merging "
                 "(indexes nothing; the ingest and snapshot flags do not apply)")
      .check(InRange{1u, bus::kMaxShards});
  cmd.add_option("--shard-timeout", flags->shard_timeout,
                 "Front: how long a query waits for every shard, retries included (then an 'unavailable' error)")
      .capture_default_str();
  cmd.add_option("--shard-retries", flags->shard_retries,
                 "Front: a shard that did not answer in --shard-timeout / (retries + 1) is asked again")
      .capture_default_str()
      .check(InRange{0, 10});
  cmd.add_flag("--check-config", flags->check_config, "Parse and validate the flags / config file, print them, exit 0");
  cmd.footer(
      "Example with two engines bridged in-process (no separate kvidx bridge):\n"
      "  kvidx serve --nats nats://127.0.0.1:4222 \\\n"
      "    --zmq 'tcp://10.0.0.5:5557,worker=3,block-size=16,replay=tcp://10.0.0.5:5558' \\\n"
      "    --zmq 'tcp://10.0.0.6:5557,worker=4,block-size=16,eagle'\n"
      "Three shards (the NATS servers' config needs\n"
      "  mappings = { \"kv.events.*\": \"kv.events.{{partition(3,1)}}.{{wildcard(1)}}\" }), and a front:\n"
      "  kvidx serve --shard 0/3 --durable kvidx-s0-a   (and 1/3, 2/3; two replicas each)\n"
      "  kvidx serve --front 3                          (answers kv.query.scores)");
  cmd.callback([flags, &exit_code](const ParsedCommand& parsed) {
    if (!flags->config_file.empty()) {
      // A missing config file is a missing input file (1), like everywhere else; bad content is a usage error.
      if (const std::string unreadable = check_input_file(flags->config_file); !unreadable.empty()) {
        std::fprintf(stderr, "kvidx serve: %s\n", unreadable.c_str());
        exit_code = kExitFailure;
        return;
      }
      // `--config FILE`: the file's keys are the long flags (`lanes = 8`, `snapshot-interval = "30s"`,
      // `subject = ["a.>"]`); flags given on the command line win.
      parsed.apply_config_file(flags->config_file, {"config", "check-config", "help"});
    }
    exit_code = run_serve(*flags);
  });
}

}  // namespace kvidx::cli
