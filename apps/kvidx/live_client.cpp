#include "apps/kvidx/live_client.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/nats_flags.h"
#include "libbus/chunked_reply.h"
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
  add_nats_options(cmd, flags.nats, live_needs_nats_flag);
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
  if (std::string error; const int code = resolve_nats(flags.nats, options, error)) {
    impl->fail(exit_code, code, error);
    return std::nullopt;
  }
  options.name = std::string("kvidx-") + command;
  options.max_reconnect = 0;
  options.log_async_errors = false;  // a refusal is reported in the command's own line (explain_refusal)
  auto connection = bus::Connection::connect(options);
  if (!connection) {
    impl->fail(exit_code, exit_code_for(connection.error()), connect_failure(connection.error(), options.url));
    return std::nullopt;
  }
  impl->connection = std::move(connection).value();
  return LiveClient(std::move(impl));
}

std::optional<std::string> LiveClient::request(const std::string& suffix, const std::string& body, int& exit_code) {
  const std::string subject = impl_->flags.prefix + "." + suffix;
  auto reply = bus::request_accepting_chunks(impl_->connection, subject, body, impl_->timeout_ms());
  if (!reply) {
    const auto status = reply.error().status;
    if (status == NATS_MISMATCH) {
      impl_->fail(exit_code, kExitIncomplete, reply.error().message);
    } else {
      const bool no_service = status == NATS_NO_RESPONDERS || reply.error().timed_out();
      impl_->fail(exit_code, kExitUnreachable,
                  refused_by_server(impl_->connection) ? explain_refusal(impl_->connection)
                  : no_service ? fmt::format("no reply on {} within {} s (is kvidx serve running with prefix '{}'?)",
                                           subject, impl_->flags.timeout_s, impl_->flags.prefix)
                             : reply.error().message);
    }
    return std::nullopt;
  }
  return std::move(reply).value();
}

std::optional<std::vector<RouterEvent>> LiveClient::dump(int& exit_code) {
  auto& conn = impl_->connection;
  const std::string subject = impl_->flags.prefix + ".admin.dump";
  const std::string inbox = conn.new_inbox();
  auto sub = conn.subscribe_sync(inbox);
  if (!sub) {
    impl_->fail(exit_code, kExitFailure, sub.error().message);
    return std::nullopt;
  }
  sub.value().set_unlimited_pending();
  auto request = bus::Message::create(subject, "{}", inbox);
  if (!request || !conn.publish(request.value()) || !conn.flush()) {
    impl_->fail(exit_code, kExitUnreachable, "cannot send the dump request");
    return std::nullopt;
  }
  std::vector<RouterEvent> events;
  std::size_t chunks = 0;
  while (true) {
    auto message = sub.value().next(impl_->timeout_ms());
    if (!message || message.value().no_responders()) {
      if (chunks == 0) {
        impl_->fail(exit_code, kExitUnreachable,
                    refused_by_server(conn) ? explain_refusal(conn) : fmt::format("no reply on {} within {} s (is kvidx serve running with prefix '{}'?)", subject,
                                impl_->flags.timeout_s, impl_->flags.prefix));
      } else {
        impl_->fail(exit_code, kExitIncomplete,
                    fmt::format("dump incomplete: {} events in {} chunk(s), then nothing for {} s (no end marker)",
                                events.size(), chunks, impl_->flags.timeout_s));
      }
      return std::nullopt;
    }
    const auto kind = message.value().header("Kvidx-Dump");
    const std::string_view body = message.value().data();
    if (kind == "end") {
      const auto end = nlohmann::json::parse(body, nullptr, false);
      if (end.is_object() && end.contains("error")) {
        const auto& error = end["error"];
        impl_->fail(exit_code, kExitFailure,
                    fmt::format("the service failed the dump ({}): {}", error.value("code", std::string("?")),
                                error.value("message", std::string(body))));
        return std::nullopt;
      }
      if (!end.is_object() || !end.contains("events") || !end.contains("chunks")) {
        impl_->fail(exit_code, kExitIncomplete, fmt::format("dump end marker without counts: {}", body));
        return std::nullopt;
      }
      const auto want_events = end.value("events", std::uint64_t{0});
      const auto want_chunks = end.value("chunks", std::uint64_t{0});
      if (want_events != events.size() || want_chunks != chunks) {
        impl_->fail(exit_code, kExitIncomplete,
                    fmt::format("dump incomplete: received {} events in {} chunk(s), the service sent {} in {}",
                                events.size(), chunks, want_events, want_chunks));
        return std::nullopt;
      }
      return events;
    }
    if (kind != "chunk") {
      impl_->fail(exit_code, kExitFailure,
                  fmt::format("unexpected message on the dump inbox (header Kvidx-Dump: {})", kind.value_or("none")));
      return std::nullopt;
    }
    ++chunks;
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
