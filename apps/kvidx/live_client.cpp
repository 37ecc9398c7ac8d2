#include "apps/kvidx/live_client.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/nats_flags.h"
#include "libbus/codec/event_codec.h"
#include "libbus/nats_connection.h"
#include "libbus/subjects.h"

namespace kvidx::cli {

struct LiveClient::Impl {
  LiveFlags flags;
  std::string command;
  bus::Connection connection;

  std::int64_t timeout_ms() const { return static_cast<std::int64_t>(flags.timeout_s * 1000); }
  void fail(int& exit_code, int code, const std::string& message) const {
    std::fprintf(stderr, "kvidx %s: %s\n", command.c_str(), message.c_str());
    exit_code = code;
  }
};

void add_live_flags(CLI::App& cmd, LiveFlags& flags, bool live_needs_nats_flag) {
  add_nats_option(cmd, flags.nats_url, live_needs_nats_flag);
  cmd.add_option("--subject-prefix", flags.prefix, "Subject prefix of that service")->capture_default_str();
  cmd.add_option("--timeout", flags.timeout_s, "Seconds to wait for a reply")->capture_default_str();
}

LiveClient::LiveClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LiveClient::~LiveClient() = default;
LiveClient::LiveClient(LiveClient&&) noexcept = default;
LiveClient& LiveClient::operator=(LiveClient&&) noexcept = default;

std::optional<LiveClient> LiveClient::connect(const LiveFlags& flags, const char* command, int& exit_code) {
  auto impl = std::make_unique<Impl>();
  impl->flags = flags;
  impl->command = command;
  bus::ConnectionOptions options;
  options.url = flags.nats_url;
  options.name = std::string("kvidx-") + command;
  options.max_reconnect = 0;
  auto connection = bus::Connection::connect(options);
  if (!connection) {
    impl->fail(exit_code, exit_code_for(connection.error()), connect_failure(connection.error(), flags.nats_url));
    return std::nullopt;
  }
  impl->connection = std::move(connection).value();
  return LiveClient(std::move(impl));
}

std::optional<std::string> LiveClient::request(const std::string& suffix, const std::string& body, int& exit_code) {
  const std::string subject = impl_->flags.prefix + "." + suffix;
  auto reply = impl_->connection.request(subject, body, impl_->timeout_ms());
  if (!reply) {
    const bool no_service = reply.error().status == NATS_NO_RESPONDERS || reply.error().timed_out();
    impl_->fail(exit_code, kExitUnreachable,
                no_service ? fmt::format("no reply on {} within {} s (is kvidx serve running with prefix '{}'?)",
                                         subject, impl_->flags.timeout_s, impl_->flags.prefix)
                           : reply.error().message);
    return std::nullopt;
  }
  return std::string(reply.value().data());
}

std::optional<std::vector<RouterEvent>> LiveClient::dump(int& exit_code) {
  auto& conn = impl_->connection;
  const std::string inbox = conn.new_inbox();
  auto sub = conn.subscribe_sync(inbox);
  if (!sub) {
    impl_->fail(exit_code, kExitFailure, sub.error().message);
    return std::nullopt;
  }
  sub.value().set_unlimited_pending();
  auto request = bus::Message::create(impl_->flags.prefix + ".admin.dump", "{}", inbox);
  if (!request || !conn.publish(request.value()) || !conn.flush()) {
    impl_->fail(exit_code, kExitUnreachable, "cannot send the dump request");
    return std::nullopt;
  }
  std::vector<RouterEvent> events;
  while (true) {
    auto message = sub.value().next(impl_->timeout_ms());
    if (!message) {
      impl_->fail(exit_code, kExitUnreachable,
                  fmt::format("dump incomplete: no message within {} s after {} events (is kvidx serve running?)",
                              impl_->flags.timeout_s, events.size()));
      return std::nullopt;
    }
    const auto kind = message.value().header("Kvidx-Dump");
    const std::string_view body = message.value().data();
    if (kind == "end") {
      if (body.find("\"error\"") != std::string_view::npos) {
        impl_->fail(exit_code, kExitFailure, fmt::format("the service refused the dump: {}", body));
        return std::nullopt;
      }
      return events;
    }
    // A chunk: JSONL of Stored events.
    std::size_t start = 0;
    while (start < body.size()) {
      std::size_t end = body.find('\n', start);
      if (end == std::string_view::npos) end = body.size();
      if (end > start) {
        auto decoded = decode_router_event(body.substr(start, end - start));
        if (!decoded) {
          impl_->fail(exit_code, kExitFailure, "bad dump line: " + decoded.error().message());
          return std::nullopt;
        }
        events.push_back(std::move(decoded).value());
      }
      start = end + 1;
    }
  }
}

}  // namespace kvidx::cli
