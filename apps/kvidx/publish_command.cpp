// kvidx publish: send the events of an event log to NATS as workers would (one message per event
// on <prefix>.events.<worker_id>), through JetStream (default) or core NATS.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/interrupt.h"
#include "apps/kvidx/nats_flags.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_jetstream.h"
#include "libbus/subjects.h"
#include "replay/event_log_reader.h"

namespace kvidx::cli {
namespace {

struct PublishFlags {
  NatsFlags nats;  // add_nats_options
  std::string events = "-";
  std::string mode = "jetstream";
  std::string prefix = "kv";
  std::string stream = "KV_EVENTS";
  bool keep_subjects = false;
  bool strict = false;
};

// Core NATS has no per-message acks: a flush (PING/PONG round trip) after a run of publishes
// confirms the server received all of them. One every kCoreFlushEvery events bounds how many are
// unconfirmed when the connection breaks.
constexpr std::uint64_t kCoreFlushEvery = 1000;
constexpr std::int64_t kAckWaitMs = 30000;
constexpr std::int64_t kAckWaitStepMs = 500;

// What happened to the events read, for the report.
struct Tally {
  std::uint64_t attempted = 0;  // events read and handed to NATS (or refused by the client)
  std::uint64_t sent = 0;       // accepted by the client library
  std::uint64_t refused = 0;    // refused before sending (e.g. larger than the server's max_payload)
  std::string first_refusal;
  std::uint64_t acked = 0;           // acknowledged by the server
  std::uint64_t answered_error = 0;  // jetstream: a negative answer (no stream, limits, ...)
  std::string first_answer_error;
  std::string stop;  // why publishing stopped before the end of the log
};

// Errors that concern one message only: count it and go on with the next.
bool message_error(const bus::BusError& error) { return error.status == NATS_MAX_PAYLOAD; }

std::string not_acked_detail(const Tally& t, bool jetstream) {
  std::vector<std::string> parts;
  if (t.refused > 0) parts.push_back(fmt::format("{} refused before sending (first: {})", t.refused, t.first_refusal));
  if (t.answered_error > 0) {
    parts.push_back(fmt::format("{} answered with an error (first: {})", t.answered_error, t.first_answer_error));
  }
  const std::uint64_t silent = t.sent - t.acked - t.answered_error;
  if (silent > 0) {
    parts.push_back(jetstream ? fmt::format("{} without an answer within {} s", silent, kAckWaitMs / 1000)
                              : fmt::format("{} not confirmed by a flush round trip", silent));
  }
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

int run_publish(const PublishFlags& flags) {
  if (const std::string unreadable = check_input_file(flags.events); !unreadable.empty()) {
    std::fprintf(stderr, "kvidx publish: %s\n", unreadable.c_str());
    return kExitFailure;
  }
  bus::ConnectionOptions options;
  if (std::string error; const int code = resolve_nats(flags.nats, options, error)) {
    std::fprintf(stderr, "kvidx publish: %s\n", error.c_str());
    return code;
  }
  options.name = "kvidx-publish";
  options.max_reconnect = 0;         // NOTE: a broken connection must show as unacknowledged events, not a hang
  options.log_async_errors = false;  // a refusal is reported in the command's own line (explain_refusal)
  auto connection = bus::Connection::connect(options);
  if (!connection) {
    std::fprintf(stderr, "kvidx publish: %s\n", connect_failure(connection.error(), options.url).c_str());
    return exit_code_for(connection.error());
  }
  const bool jetstream = flags.mode == "jetstream";
  bus::AsyncPublishAcks acks;
  std::optional<bus::JetStream> js;
  if (jetstream) {
    bus::JetStreamOptions js_options;
    js_options.publish_acks = &acks;
    auto created = bus::JetStream::create(connection.value(), js_options);
    if (!created) {
      std::fprintf(stderr, "kvidx publish: %s\n", created.error().message.c_str());
      return exit_code_for(created.error());
    }
    js = std::move(created).value();
    // NOTE: a stream that is missing would only show as every event unacknowledged; say why up front.
    if (auto state = js->stream_state(flags.stream); !state) {
      std::fprintf(stderr,
                   "kvidx publish: JetStream stream %s not found (%s); start kvidx serve first, "
                   "or use --mode core\n",
                   flags.stream.c_str(), state.error().message.c_str());
      return kExitFailure;
    }
  }
  install_interrupt_handlers();
  Tally t;
  std::uint64_t unflushed = 0;
  auto flush_core = [&] {
    if (unflushed == 0) return;
    if (auto done = connection.value().flush(); !done) {
      t.stop = "flush failed: " + done.error().message;
      return;
    }
    t.acked += unflushed;
    unflushed = 0;
  };
  const bus::Subjects subjects(flags.prefix);
  const auto start = std::chrono::steady_clock::now();
  auto read =
      read_event_log(flags.events, flags.strict ? BadLinePolicy::stop : BadLinePolicy::skip, [&](EventLogLine&& line) {
        if (!t.stop.empty() || interrupted().load()) return;
        const std::string subject =
            flags.keep_subjects && line.subject ? *line.subject : subjects.events(line.event.worker_id);
        const std::string payload = encode_router_event(line.event);
        ++t.attempted;
        auto status = jetstream ? js->publish_async(subject, payload) : connection.value().publish(subject, payload);
        if (!status) {
          if (!message_error(status.error())) {
            t.stop = status.error().message;
            return;
          }
          if (t.refused++ == 0) t.first_refusal = status.error().message;
          return;
        }
        ++t.sent;
        if (!jetstream && ++unflushed >= kCoreFlushEvery) flush_core();
      });
  if (jetstream) {
    // NOTE: a timeout here leaves the unanswered publishes counted as not acknowledged. Waits in
    // steps so a publish the server refused (permissions: no answer ever comes) ends the wait.
    for (std::int64_t waited = 0; waited < kAckWaitMs; waited += kAckWaitStepMs) {
      auto done = js->publish_async_complete(kAckWaitStepMs);
      if (done) break;
      if (!done.error().timed_out()) {
        if (t.stop.empty()) t.stop = done.error().message;
        break;
      }
      if (refused_by_server(connection.value())) break;
    }
    t.acked = acks.acked.load();
    t.answered_error = acks.failed.load();
    t.first_answer_error = acks.first_error();
  } else if (t.stop.empty()) {
    flush_core();
  }
  // NOTE: the server answers a publish it does not permit with an asynchronous -ERR, not a negative
  // ack: in core mode a flush still succeeds. Such a run is refused, whatever was counted.
  std::string refusal;
  if (refused_by_server(connection.value())) {
    refusal = explain_refusal(connection.value());
    if (jetstream)
      t.acked = acks.acked.load();
    else
      t.acked = 0;
  }
  const bool was_interrupted = interrupted().load();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "kvidx publish: %llu events published (%s) and acknowledged by the server, of %llu read, in %.2f s, "
               "%llu bad lines\n",
               static_cast<unsigned long long>(t.acked), flags.mode.c_str(),
               static_cast<unsigned long long>(t.attempted), seconds,
               static_cast<unsigned long long>(read.stats.bad_lines));
  for (const auto& bad : read.stats.first_bad_lines) {
    std::fprintf(stderr, "  %s:%llu: %s\n", flags.events.c_str(), static_cast<unsigned long long>(bad.line_number),
                 bad.reason.c_str());
  }
  if (!t.stop.empty())
    std::fprintf(stderr, "kvidx publish: stopped: %s; the rest of the log was not sent\n", t.stop.c_str());
  if (was_interrupted) std::fprintf(stderr, "kvidx publish: interrupted: the rest of the log was not sent\n");
  if (t.acked < t.attempted) {
    std::fprintf(stderr, "kvidx publish: %llu of %llu events NOT acknowledged: %s\n",
                 static_cast<unsigned long long>(t.attempted - t.acked), static_cast<unsigned long long>(t.attempted),
                 not_acked_detail(t, jetstream).c_str());
  }
  if (!refusal.empty()) {
    std::fprintf(stderr, "kvidx publish: %s\n", refusal.c_str());
    return kExitUnreachable;
  }
  if (!read.ok()) {
    std::fprintf(stderr, "kvidx publish: %s\n", read.error.c_str());
    return read.stats.bad_lines > 0 && flags.strict ? kExitBadInput : kExitFailure;
  }
  if (t.acked < t.attempted) return kExitIncomplete;
  if (!t.stop.empty()) return kExitFailure;
  if (was_interrupted) return kExitInterrupted;
  return kExitOk;
}

}  // namespace

void add_publish_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<PublishFlags>();
  Command& cmd = app.add_subcommand("publish", "Publish the events of an event log to NATS, as workers would");
  add_nats_options(cmd, flags->nats);
  cmd.add_option("--events", flags->events, "Event log to read ('-' for stdin, .gz ok)").capture_default_str();
  cmd.add_option("--mode", flags->mode,
                 "jetstream (each event acknowledged by the stream) or core (acknowledged: a flush round trip "
                 "confirmed the server received it)")
      .check(IsMember{{"jetstream", "core"}})
      .capture_default_str();
  cmd.add_option("--subject-prefix", flags->prefix, "Subject prefix: events go to <prefix>.events.<worker_id>")
      .capture_default_str();
  cmd.add_option("--stream", flags->stream, "JetStream stream that must capture the subjects (jetstream mode)")
      .capture_default_str();
  cmd.add_flag("--keep-subjects", flags->keep_subjects,
               "Publish captured lines on the subject they were captured from");
  cmd.add_flag("--strict", flags->strict, "Stop at the first bad line");
  cmd.footer(
      "Reports how many events the server acknowledged; exits 5 naming how many it did not (refused as too large,\n"
      "answered with an error, or no answer within 30 s).\n"
      "Example: kvidx publish --nats nats://127.0.0.1:4222 --events captured.jsonl.gz");
  cmd.callback([flags, &exit_code] { exit_code = run_publish(*flags); });
}

}  // namespace kvidx::cli
