// kvidx bridge: subscribe to one vLLM / SGLang engine's ZMQ KV-event socket (msgpack batches),
// convert to RouterEvents (bridge/) and publish them on <prefix>.events.<worker_id> for a running
// `kvidx serve`, through JetStream (default) or core NATS. Runs until SIGINT/SIGTERM.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/interrupt.h"
#include "apps/kvidx/nats_flags.h"
#include "bridge/nats_event_sink.h"
#include "bridge/zmq_event_bridge.h"
#include "libbus/nats_url.h"

namespace kvidx::cli {
namespace {

struct BridgeFlags {
  std::string zmq = "tcp://127.0.0.1:5557";
  std::string replay;
  std::string topic;
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
  std::uint32_t block_size = 0;
  NatsFlags nats;  // add_nats_options
  std::string mode = "jetstream";
  std::string prefix = "kv";
  std::string stream = "KV_EVENTS";
  bool clear_on_gap = false;
  bool eagle = false;
  int replay_timeout_ms = 2000;
  int stats_interval_s = 60;
};

void print_stats(const bridge::ZmqBridgeStats& s, const bridge::NatsEventSink& sink) {
  std::fprintf(stderr,
               "kvidx bridge: %llu batches -> %llu events published; gaps %llu (missing %llu, replayed %llu, lost "
               "%llu), restarts %llu, malformed %llu, publish failures %llu, dropped stored: %llu block size, "
               "%llu empty\n",
               static_cast<unsigned long long>(s.batches_delivered), static_cast<unsigned long long>(sink.published()),
               static_cast<unsigned long long>(s.gaps), static_cast<unsigned long long>(s.missing_batches),
               static_cast<unsigned long long>(s.replayed_batches),
               static_cast<unsigned long long>(s.unrecovered_batches), static_cast<unsigned long long>(s.restarts),
               static_cast<unsigned long long>(s.malformed_frames), static_cast<unsigned long long>(s.sink_failures),
               static_cast<unsigned long long>(s.conversion.block_size_mismatches),
               static_cast<unsigned long long>(s.conversion.empty_stores_dropped));
}

int run_bridge(const BridgeFlags& flags) {
  bridge::NatsSinkOptions sink_options;
  bus::ConnectionOptions connection;
  if (std::string error; const int code = resolve_nats(flags.nats, connection, error)) {
    std::fprintf(stderr, "kvidx bridge: %s\n", error.c_str());
    return code;
  }
  sink_options.url = connection.url;
  sink_options.auth = connection.auth;
  sink_options.jetstream = flags.mode == "jetstream";
  sink_options.subject_prefix = flags.prefix;
  sink_options.stream = flags.stream;
  auto sink = bridge::NatsEventSink::connect(sink_options);
  if (!sink) {
    std::fprintf(stderr, "kvidx bridge: %s\n", connect_failure(sink.error(), sink_options.url).c_str());
    return exit_code_for(sink.error());
  }
  bridge::ZmqBridgeConfig config;
  config.endpoint = flags.zmq;
  config.replay_endpoint = flags.replay;
  config.topic = flags.topic;
  config.conversion.worker_id = flags.worker_id;
  config.conversion.default_dp_rank = flags.dp_rank;
  config.conversion.block_size = flags.block_size;
  config.clear_on_gap = flags.clear_on_gap;
  config.conversion.eagle = flags.eagle;
  config.replay_timeout = std::chrono::milliseconds(flags.replay_timeout_ms);
  bridge::ZmqEventBridge bridge(config, *sink.value());
  install_interrupt_handlers();
  if (auto started = bridge.start(); !started) {
    std::fprintf(stderr, "kvidx bridge: %s: %s\n", flags.zmq.c_str(), started.error().c_str());
    return kExitFailure;
  }
  std::fprintf(stderr, "kvidx bridge: %s%s%s -> %s (%s) as worker %llu, block size %u\n", flags.zmq.c_str(),
               flags.replay.empty() ? "" : ", replay ", flags.replay.c_str(), bus::redact_url(sink_options.url).c_str(),
               flags.mode.c_str(), static_cast<unsigned long long>(flags.worker_id), flags.block_size);
  auto next_report = std::chrono::steady_clock::now() + std::chrono::seconds(flags.stats_interval_s);
  while (!interrupted().load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (flags.stats_interval_s > 0 && std::chrono::steady_clock::now() >= next_report) {
      print_stats(bridge.stats(), *sink.value());
      next_report += std::chrono::seconds(flags.stats_interval_s);
    }
  }
  bridge.stop();
  print_stats(bridge.stats(), *sink.value());
  return kExitOk;
}

}  // namespace

void add_bridge_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<BridgeFlags>();
  Command& cmd = app.add_subcommand("bridge", "Bridge a vLLM / SGLang engine's ZMQ KV events (msgpack) into NATS");
  cmd.add_option("--zmq", flags->zmq, "The engine's ZMQ PUB endpoint (connected to)").capture_default_str();
  cmd.add_option("--replay", flags->replay, "The engine's ZMQ ROUTER replay endpoint, to fill sequence gaps");
  cmd.add_option("--topic", flags->topic, "ZMQ topic prefix to subscribe to (default: all)");
  cmd.add_option("--worker-id", flags->worker_id, "Worker id the engine's events are published as").required();
  cmd.add_option("--dp-rank", flags->dp_rank, "Data-parallel rank when a batch carries none").capture_default_str();
  cmd.add_option("--block-size", flags->block_size, "KV block size in tokens (must match the engine and router)")
      .required()
      .check(PositiveNumber{});
  add_nats_options(cmd, flags->nats);
  cmd.add_option("--mode", flags->mode, "jetstream (acked by the server) or core")
      .check(IsMember{{"jetstream", "core"}})
      .capture_default_str();
  cmd.add_option("--subject-prefix", flags->prefix, "Events go to <prefix>.events.<worker_id>").capture_default_str();
  cmd.add_option("--stream", flags->stream, "JetStream stream that must capture the subjects").capture_default_str();
  cmd.add_flag("--clear-on-gap", flags->clear_on_gap,
               "On a gap that replay cannot fill, send a clear for the worker before continuing (re-sync)");
  cmd.add_flag("--eagle", flags->eagle,
               "Eagle hashing: each block's tokens_hash covers its tokens plus the next block's first token "
               "(the router must hash queries the same way); bigram token ids imply it");
  cmd.add_option("--replay-timeout-ms", flags->replay_timeout_ms, "Give up on a replay after this long without a reply")
      .capture_default_str();
  cmd.add_option("--stats-interval", flags->stats_interval_s, "Seconds between stats lines on stderr (0: only at exit)")
      .capture_default_str();
  cmd.footer(
      "Example: kvidx bridge --zmq tcp://127.0.0.1:5557 --replay tcp://127.0.0.1:5558 --worker-id 3 --block-size 16 "
      "--nats nats://127.0.0.1:4222");
  cmd.callback([flags, &exit_code] { exit_code = run_bridge(*flags); });
}

}  // namespace kvidx::cli
