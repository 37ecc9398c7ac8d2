// kvidx publish: send the events of an event log to NATS as workers would (one message per event
// on <prefix>.events.<worker_id>), through JetStream (default) or core NATS.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/interrupt.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "replay/event_log_reader.h"

namespace kvidx::cli {
namespace {

struct PublishFlags {
  std::string nats_url = "nats://127.0.0.1:4222";
  std::string events = "-";
  std::string mode = "jetstream";
  std::string prefix = "kv";
  std::string stream = "KV_EVENTS";
  bool keep_subjects = false;
  bool strict = false;
};

int run_publish(const PublishFlags& flags) {
  bus::ConnectionOptions options;
  options.url = flags.nats_url;
  options.name = "kvidx-publish";
  auto connection = bus::Connection::connect(options);
  if (!connection) {
    std::fprintf(stderr, "kvidx publish: cannot connect to %s: %s\n", flags.nats_url.c_str(),
                 connection.error().message.c_str());
    return kExitUnreachable;
  }
  const bool jetstream = flags.mode == "jetstream";
  std::optional<bus::JetStream> js;
  if (jetstream) {
    auto created = bus::JetStream::create(connection.value());
    if (!created) {
      std::fprintf(stderr, "kvidx publish: %s\n", created.error().message.c_str());
      return kExitFailure;
    }
    js = std::move(created).value();
    // NOTE: async JetStream publishes to a subject no stream captures fail only in a callback, so
    // check up front that the stream exists instead of reporting a silent success.
    if (auto state = js->stream_state(flags.stream); !state) {
      std::fprintf(stderr,
                   "kvidx publish: JetStream stream %s not found (%s); start kvidx serve first, "
                   "or use --mode core\n",
                   flags.stream.c_str(), state.error().message.c_str());
      return kExitFailure;
    }
  }
  install_interrupt_handlers();
  std::string failure;
  std::uint64_t published = 0;
  const auto start = std::chrono::steady_clock::now();
  auto read = read_event_log(flags.events, flags.strict ? BadLinePolicy::stop : BadLinePolicy::skip,
                             [&](EventLogLine&& line) {
                               if (!failure.empty() || interrupted().load()) return;
                               const std::string subject = flags.keep_subjects && line.subject
                                                               ? *line.subject
                                                               : fmt::format("{}.events.{}", flags.prefix, line.event.worker_id);
                               const std::string payload = encode_router_event(line.event);
                               auto status = jetstream ? js->publish_async(subject, payload)
                                                       : connection.value().publish(subject, payload);
                               if (!status) failure = status.error().message;
                               else ++published;
                             });
  if (failure.empty() && jetstream) {
    if (auto done = js->publish_async_complete(30000); !done) failure = done.error().message;
  } else if (failure.empty()) {
    if (auto done = connection.value().flush(); !done) failure = done.error().message;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "kvidx publish: %llu events published (%s) in %.2f s, %llu bad lines\n",
               static_cast<unsigned long long>(published), flags.mode.c_str(), seconds,
               static_cast<unsigned long long>(read.stats.bad_lines));
  for (const auto& bad : read.stats.first_bad_lines) {
    std::fprintf(stderr, "  %s:%llu: %s\n", flags.events.c_str(), static_cast<unsigned long long>(bad.line_number),
                 bad.reason.c_str());
  }
  if (!read.ok()) {
    std::fprintf(stderr, "kvidx publish: %s\n", read.error.c_str());
    return kExitFailure;
  }
  if (!failure.empty()) {
    std::fprintf(stderr, "kvidx publish: %s\n", failure.c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void add_publish_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<PublishFlags>();
  auto* cmd = app.add_subcommand("publish", "Publish the events of an event log to NATS, as workers would");
  cmd->add_option("--nats", flags->nats_url, "NATS server URL")->capture_default_str();
  cmd->add_option("--events", flags->events, "Event log to read ('-' for stdin, .gz ok)")->capture_default_str();
  cmd->add_option("--mode", flags->mode, "jetstream (acked by the server) or core")
      ->check(CLI::IsMember({"jetstream", "core"}))
      ->capture_default_str();
  cmd->add_option("--subject-prefix", flags->prefix, "Subject prefix: events go to <prefix>.events.<worker_id>")
      ->capture_default_str();
  cmd->add_option("--stream", flags->stream, "JetStream stream that must capture the subjects (jetstream mode)")
      ->capture_default_str();
  cmd->add_flag("--keep-subjects", flags->keep_subjects, "Publish captured lines on the subject they were captured from");
  cmd->add_flag("--strict", flags->strict, "Stop at the first bad line");
  cmd->footer("Example: kvidx publish --nats nats://127.0.0.1:4222 --events captured.jsonl.gz");
  cmd->callback([flags, &exit_code] { exit_code = run_publish(*flags); });
}

}  // namespace kvidx::cli
