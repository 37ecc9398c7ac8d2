#include "apps/kvidx/live_client.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/nats_flags.h"
#include "libbus/chunked_reply.h"
#include "libbus/nats_connection.h"
#include "libbus/retrying_request.h"
#include "libbus/shard_scatter.h"
#include "libbus/shard_spec.h"
#include "libcodec/dump_codec.h"
#include "libcodec/query_codec.h"

namespace kvidx::cli {

struct LiveClient::Impl {
  LiveFlags flags;
  bus::Subjects subjects;
  std::string command;
  bus::Connection connection;

  std::int64_t timeout_ms() const { return static_cast<std::int64_t>(flags.timeout_s * 1000); }
  void fail(int& exit_code, int code, const std::string& message) const {
    std::fprintf(stderr, "kvidx %s: %s\n", command.c_str(), message.c_str());
    exit_code = code;
  }
  // A request on `subject` failed after `attempts` tries (0: a plain request, not retried).
  void request_failed(int& exit_code, const bus::BusError& error, const std::string& subject, int attempts) const {
    if (error.status == NATS_MISMATCH) return fail(exit_code, kExitIncomplete, error.message);
    const bool no_service = error.status == NATS_NO_RESPONDERS || error.timed_out();
    const std::string tries = attempts > 0 ? fmt::format(" after {} attempt(s)", attempts) : std::string();
    fail(exit_code, kExitUnreachable,
         refused_by_server(connection) ? explain_refusal(connection)
         : no_service ? fmt::format("no reply on {} within {} s{} (is kvidx serve running with prefix '{}'?)", subject,
                                    flags.timeout_s, tries, flags.prefix)
                      : error.message);
  }
};

void add_live_flags(Command& cmd, LiveFlags& flags, bool live_needs_nats_flag) {
  add_nats_options(cmd, flags.nats, live_needs_nats_flag);
  cmd.add_option("--subject-prefix", flags.prefix, "Subject prefix of that service").capture_default_str();
  cmd.add_option("--timeout", flags.timeout_s, "Seconds to wait for a reply").capture_default_str();
}

void add_shard_flag(Command& cmd, LiveFlags& flags) {
  cmd.add_option("--shard", flags.shard,
                 "Ask shard I of N of a sharded deployment (I/N: its <prefix>.shard.I.admin.* subjects)");
}

void add_retries_flag(Command& cmd, LiveFlags& flags) {
  cmd.add_option("--retries", flags.retries,
                 "Extra attempts when no replica answered (each waits --timeout / (retries + 1))")
      .capture_default_str()
      .check(InRange{0, 10});
}

LiveClient::LiveClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LiveClient::~LiveClient() = default;
LiveClient::LiveClient(LiveClient&&) noexcept = default;
LiveClient& LiveClient::operator=(LiveClient&&) noexcept = default;

std::optional<LiveClient> LiveClient::connect(const LiveFlags& flags, const char* command, int& exit_code) {
  auto impl = std::make_unique<Impl>();
  impl->flags = flags;
  impl->command = command;
  std::optional<bus::ShardSpec> shard;
  if (!flags.shard.empty()) {
    auto parsed = bus::parse_shard_spec(flags.shard);
    if (!parsed.ok()) {
      impl->fail(exit_code, kExitUsage, parsed.error().message);
      return std::nullopt;
    }
    shard = parsed.value();
  }
  impl->subjects = bus::Subjects(flags.prefix, shard);
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

const bus::Subjects& LiveClient::subjects() const { return impl_->subjects; }

std::optional<std::string> LiveClient::request(const std::string& subject, const std::string& body, int& exit_code) {
  auto reply = bus::request_accepting_chunks(impl_->connection, subject, body, impl_->timeout_ms());
  if (!reply) {
    impl_->request_failed(exit_code, reply.error(), subject, 0);
    return std::nullopt;
  }
  return std::move(reply).value();
}

std::optional<std::string> LiveClient::scatter_scores(const std::string& body, std::uint32_t shards, int& exit_code) {
  bus::ScatterOptions options;
  options.shards = shards;
  options.timeout = std::chrono::milliseconds(impl_->timeout_ms());
  options.retries = impl_->flags.retries;
  auto scatter = bus::ShardScatter::start(impl_->connection, impl_->subjects, options);
  if (!scatter.ok()) {
    impl_->request_failed(exit_code, scatter.error(), impl_->subjects.shard_query_scores(0), 0);
    return std::nullopt;
  }
  auto outcome = scatter.value()->query_sync(body);
  if (!outcome.ok()) {
    if (outcome.error().code == "unavailable") {
      impl_->fail(exit_code, kExitUnreachable, outcome.error().message);
      return std::nullopt;
    }
    return encode_error_reply(outcome.error());  // a shard's own error reply, printed as is
  }
  return std::move(outcome).value();
}

std::optional<std::string> LiveClient::request_retrying(const std::string& subject, const std::string& body,
                                                        int& exit_code, int* attempts) {
  bus::RetryPolicy policy;
  policy.retries = impl_->flags.retries;
  policy.timeout_ms = impl_->timeout_ms();
  auto reply = bus::request_retrying(impl_->connection, subject, body, policy);
  if (!reply) {
    impl_->request_failed(exit_code, reply.error(), subject, impl_->flags.retries + 1);
    return std::nullopt;
  }
  if (attempts != nullptr) *attempts = reply.value().attempts;
  return std::move(reply).value().body;
}

std::vector<std::string> LiveClient::gather(const std::string& subject, const std::string& body, double window_s,
                                            int& exit_code) {
  auto& conn = impl_->connection;
  const std::string inbox = conn.new_inbox();
  auto sub = conn.subscribe_sync(inbox);
  if (!sub) {
    impl_->fail(exit_code, kExitFailure, sub.error().message);
    return {};
  }
  auto request = bus::Message::create(subject, body, inbox);
  if (!request || !conn.publish(request.value()) || !conn.flush()) {
    impl_->fail(exit_code, kExitUnreachable, "cannot send the request on " + subject);
    return {};
  }
  std::vector<std::string> replies;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(window_s * 1000));
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    auto message = sub.value().next(left);
    if (!message) break;  // the window is over
    if (message.value().no_responders()) break;
    replies.emplace_back(message.value().data());
  }
  if (replies.empty()) {
    impl_->fail(exit_code, kExitUnreachable,
                refused_by_server(conn) ? explain_refusal(conn)
                                        : fmt::format("no replica answered on {} within {} s (is kvidx serve running "
                                                      "with prefix '{}'?)",
                                                      subject, window_s, impl_->flags.prefix));
  }
  return replies;
}

std::optional<std::vector<RouterEvent>> LiveClient::dump(int& exit_code) {
  auto& conn = impl_->connection;
  const std::string subject = impl_->subjects.admin_dump();
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
                    refused_by_server(conn)
                        ? explain_refusal(conn)
                        : fmt::format("no reply on {} within {} s (is kvidx serve running with prefix '{}'?)", subject,
                                      impl_->flags.timeout_s, impl_->flags.prefix));
      } else {
        impl_->fail(exit_code, kExitIncomplete,
                    fmt::format("dump incomplete: {} events in {} chunk(s), then nothing for {} s (no end marker)",
                                events.size(), chunks, impl_->flags.timeout_s));
      }
      return std::nullopt;
    }
    const auto kind = message.value().header(kDumpHeader);
    const std::string_view body = message.value().data();
    if (kind == kDumpEnd) {
      if (const auto error = decode_error_reply(body)) {
        impl_->fail(exit_code, kExitFailure,
                    fmt::format("the service failed the dump ({}): {}", error->code, error->message));
        return std::nullopt;
      }
      const auto end = decode_dump_end(body);
      if (!end.ok()) {
        impl_->fail(exit_code, kExitIncomplete, fmt::format("dump end marker without counts: {}", body));
        return std::nullopt;
      }
      const auto want_events = end.value().events;
      const auto want_chunks = end.value().chunks;
      if (want_events != events.size() || want_chunks != chunks) {
        impl_->fail(exit_code, kExitIncomplete,
                    fmt::format("dump incomplete: received {} events in {} chunk(s), the service sent {} in {}",
                                events.size(), chunks, want_events, want_chunks));
        return std::nullopt;
      }
      return events;
    }
    if (kind != kDumpChunk) {
      impl_->fail(exit_code, kExitFailure,
                  fmt::format("unexpected message on the dump inbox (header Kvidx-Dump: {})", kind.value_or("none")));
      return std::nullopt;
    }
    ++chunks;
    auto chunk = decode_dump_chunk(body);
    if (!chunk.ok()) {
      impl_->fail(exit_code, kExitFailure, "bad dump line: " + chunk.error().message());
      return std::nullopt;
    }
    events.insert(events.end(), std::make_move_iterator(chunk.value().begin()),
                  std::make_move_iterator(chunk.value().end()));
  }
}

}  // namespace kvidx::cli
