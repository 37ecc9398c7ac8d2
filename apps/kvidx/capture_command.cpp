// kvidx capture: record live KV events into an event log (one wrapped line per event).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/interrupt.h"
#include "apps/kvidx/nats_flags.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_url.h"
#include "libbus/subjects.h"
#include "replay/capture_writer.h"

namespace kvidx::cli {
namespace {

struct CaptureFlags {
  NatsFlags nats;  // add_nats_options
  std::string subject = bus::Subjects().events_wildcard();
  std::string out;
  std::uint64_t max_events = 0;
  double duration_s = 0;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int run_capture(const CaptureFlags& flags) {
  CaptureWriter capture(flags.out);
  if (!capture.ok()) {
    std::fprintf(stderr, "kvidx capture: %s\n", capture.error().c_str());
    return kExitFailure;
  }
  bus::ConnectionOptions options;
  if (std::string error; const int code = resolve_nats(flags.nats, options, error)) {
    std::fprintf(stderr, "kvidx capture: %s\n", error.c_str());
    return code;
  }
  options.name = "kvidx-capture";
  auto connection = bus::Connection::connect(options);
  if (!connection) {
    std::fprintf(stderr, "kvidx capture: %s\n", connect_failure(connection.error(), options.url).c_str());
    return exit_code_for(connection.error());
  }
  install_interrupt_handlers();
  auto subscription = connection.value().subscribe(flags.subject, [&capture](bus::Message message) {
    capture.on_message(message.subject(), message.data(), now_seconds());
  });
  if (!subscription) {
    std::fprintf(stderr, "kvidx capture: cannot subscribe to %s: %s\n", flags.subject.c_str(),
                 subscription.error().message.c_str());
    return exit_code_for(subscription.error());
  }
  subscription.value().set_unlimited_pending();
  std::fprintf(stderr, "kvidx capture: recording %s from %s into %s (Ctrl-C to stop)\n", flags.subject.c_str(),
               bus::redact_url(options.url).c_str(), flags.out.c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(flags.duration_s);
  while (!interrupted().load()) {
    if (flags.max_events > 0 && capture.stats().events >= flags.max_events) break;
    if (flags.duration_s > 0 && std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  subscription.value().close();  // NOTE: waits for an in-flight handler before the file closes
  const bool closed = capture.close();
  const auto stats = capture.stats();
  std::fprintf(stderr, "kvidx capture: %llu messages, %llu events written, %llu bad messages%s\n",
               static_cast<unsigned long long>(stats.messages), static_cast<unsigned long long>(stats.events),
               static_cast<unsigned long long>(stats.bad_messages),
               stats.bad_messages > 0 ? fmt::format(" (first: {})", stats.first_bad_reason).c_str() : "");
  if (!closed) {
    std::fprintf(stderr, "kvidx capture: %s\n", capture.error().c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void add_capture_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<CaptureFlags>();
  Command& cmd = app.add_subcommand("capture", "Record live KV events from NATS into an event log");
  add_nats_options(cmd, flags->nats);
  cmd.add_option("--subject", flags->subject, "Subject or wildcard to record").capture_default_str();
  cmd.add_option("--out", flags->out, "Event log to write ('-' for stdout, .gz compresses)").required();
  cmd.add_option("--max", flags->max_events, "Stop after N events (0: no limit)");
  cmd.add_option("--duration", flags->duration_s, "Stop after S seconds (0: until Ctrl-C)");
  cmd.footer("Example: kvidx capture --nats nats://127.0.0.1:4222 --out events.jsonl.gz --duration 60");
  cmd.callback([flags, &exit_code] { exit_code = run_capture(*flags); });
}

}  // namespace kvidx::cli
