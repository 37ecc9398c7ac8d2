#include "libbus/nats_connection.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <vector>

#include <memory>
#include <string>
#include <utility>

#include "libbus/nats_nonce_signer.h"
#include "libbus/nats_url.h"

namespace kvidx::bus {
namespace {

void on_disconnected(natsConnection* nc, void*) {
  // NOTE: nats.c also reports a disconnect while closing on purpose; stay quiet then.
  if (!natsConnection_IsClosed(nc)) spdlog::warn("NATS connection lost; reconnecting");
}
void on_reconnected(natsConnection* nc, void*) {
  char url[256] = {};
  natsConnection_GetConnectedUrl(nc, url, sizeof(url));
  spdlog::info("NATS reconnected to {}", redact_url(url));
}
void on_async_error(natsConnection* nc, natsSubscription*, natsStatus err, void* quiet) {
  if (quiet != nullptr) return;  // the caller reports last_error() itself
  // NOTE: the server's own text says what was refused (e.g. "Permissions Violation for Publish to
  // kv.events.8"); it names subjects, never credentials.
  const char* text = nullptr;
  natsConnection_GetLastError(nc, &text);
  spdlog::warn("NATS async error: {}{}{}", natsStatus_GetText(err), text != nullptr && *text != '\0' ? ": " : "",
               text != nullptr ? text : "");
}

std::vector<std::string> split_urls(const std::string& urls) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= urls.size()) {
    const std::size_t comma = urls.find(',', start);
    std::string one = urls.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    one.erase(0, one.find_first_not_of(' '));
    one.erase(one.find_last_not_of(' ') + 1);
    if (!one.empty()) out.push_back(std::move(one));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool is_tls_url(const std::string& url) { return url.rfind("tls://", 0) == 0; }

// Applies the authentication and TLS options. Errors name the option and the file, never a secret.
BusStatus apply_auth(natsOptions* opts, const NatsAuth& auth, bool tls_url, std::unique_ptr<NonceSigner>& signer) {
  auto check = [](natsStatus s, const std::string& what) -> BusStatus {
    if (s != NATS_OK) return nats_error(s, what);
    return {};
  };
  if (auth.tls_first) {
    return BusError{NATS_INVALID_ARG,
                    "--tlsfirst: TLS before the server's INFO is not supported by the NATS client library "
                    "(libnats 3.4.1); configure the server to accept the usual STARTTLS-style upgrade"};
  }
  if (auth.tls() || tls_url) {
    if (auto s = check(natsOptions_SetSecure(opts, true), "enable TLS"); !s.ok()) return s;
  }
  if (!auth.tls_ca.empty()) {
    if (auto s = check(natsOptions_LoadCATrustedCertificates(opts, auth.tls_ca.c_str()), "load TLS CA " + auth.tls_ca);
        !s.ok()) {
      return s;
    }
  }
  if (auth.tls_cert.empty() != auth.tls_key.empty()) {
    return BusError{NATS_INVALID_ARG, "TLS client certificate and key go together: give both --tlscert and --tlskey"};
  }
  if (!auth.tls_cert.empty()) {
    if (auto s = check(natsOptions_LoadCertificatesChain(opts, auth.tls_cert.c_str(), auth.tls_key.c_str()),
                       "load TLS certificate " + auth.tls_cert + " and key " + auth.tls_key);
        !s.ok()) {
      return s;
    }
  }
  const int methods = (auth.creds_file.empty() ? 0 : 1) + (auth.nkey_seed_file.empty() ? 0 : 1) +
                      (auth.token.empty() ? 0 : 1) + (auth.user.empty() && auth.password.empty() ? 0 : 1);
  if (methods > 1) {
    return BusError{NATS_INVALID_ARG, "give one way to authenticate: --creds, --nkey, --token or --user/--password"};
  }
  if (!auth.creds_file.empty() || !auth.nkey_seed_file.empty()) {
    auto made =
        auth.creds_file.empty() ? NonceSigner::for_nkey(auth.nkey_seed_file) : NonceSigner::for_creds(auth.creds_file);
    if (!made) return made.error();
    signer = std::move(made).value();
    return signer->install(opts);
  }
  if (!auth.token.empty()) return check(natsOptions_SetToken(opts, auth.token.c_str()), "set the token");
  if (!auth.user.empty() || !auth.password.empty()) {
    if (auth.user.empty()) return BusError{NATS_INVALID_ARG, "a password needs a user (--user)"};
    return check(natsOptions_SetUserInfo(opts, auth.user.c_str(), auth.password.c_str()), "set user " + auth.user);
  }
  return {};
}

}  // namespace

Connection::Connection(Connection&& other) noexcept
    : nc_(std::exchange(other.nc_, nullptr)),
      opts_(std::exchange(other.opts_, nullptr)),
      signer_(std::move(other.signer_)),
      inbox_prefix_(std::move(other.inbox_prefix_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    reset();
    nc_ = std::exchange(other.nc_, nullptr);
    opts_ = std::exchange(other.opts_, nullptr);
    signer_ = std::move(other.signer_);
    inbox_prefix_ = std::move(other.inbox_prefix_);
  }
  return *this;
}

Connection::~Connection() { reset(); }

void Connection::reset() noexcept {
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);
    natsConnection_Destroy(nc_);
    nc_ = nullptr;
  }
  if (opts_ != nullptr) {
    natsOptions_Destroy(opts_);
    opts_ = nullptr;
  }
  signer_.reset();
}

BusResult<Connection> Connection::connect(const ConnectionOptions& options) {
  Connection conn;
  natsStatus s = natsOptions_Create(&conn.opts_);
  if (s != NATS_OK) return nats_error(s, "natsOptions_Create");
  struct Step {
    natsStatus status;
    const char* what;
  };
  const std::vector<std::string> urls = split_urls(options.url);
  if (urls.empty()) return BusError{NATS_INVALID_ARG, "no NATS server URL given"};
  std::vector<const char*> url_ptrs;
  for (const auto& u : urls) url_ptrs.push_back(u.c_str());
  const bool tls_url = std::any_of(urls.begin(), urls.end(), is_tls_url);
  if (auto applied = apply_auth(conn.opts_, options.auth, tls_url, conn.signer_); !applied.ok()) return applied.error();
  if (!options.auth.inbox_prefix.empty()) {
    if (natsStatus st = natsOptions_SetCustomInboxPrefix(conn.opts_, options.auth.inbox_prefix.c_str());
        st != NATS_OK) {
      return nats_error(st, "inbox prefix " + options.auth.inbox_prefix);
    }
    conn.inbox_prefix_ = options.auth.inbox_prefix;
  }
  const Step steps[] = {
      {urls.size() == 1 ? natsOptions_SetURL(conn.opts_, urls[0].c_str())
                        : natsOptions_SetServers(conn.opts_, url_ptrs.data(), static_cast<int>(url_ptrs.size())),
       "set the server URL(s)"},
      {natsOptions_SetName(conn.opts_, options.name.c_str()), "natsOptions_SetName"},
      {natsOptions_SetSendAsap(conn.opts_, options.send_asap), "natsOptions_SetSendAsap"},
      {natsOptions_SetMaxReconnect(conn.opts_, options.max_reconnect), "natsOptions_SetMaxReconnect"},
      {natsOptions_SetReconnectWait(conn.opts_, options.reconnect_wait_ms), "natsOptions_SetReconnectWait"},
      {natsOptions_SetTimeout(conn.opts_, options.connect_timeout_ms), "natsOptions_SetTimeout"},
      {natsOptions_SetDisconnectedCB(conn.opts_, on_disconnected, nullptr), "natsOptions_SetDisconnectedCB"},
      {natsOptions_SetReconnectedCB(conn.opts_, on_reconnected, nullptr), "natsOptions_SetReconnectedCB"},
      {natsOptions_SetErrorHandler(conn.opts_, on_async_error,
                                   options.log_async_errors ? nullptr : reinterpret_cast<void*>(1)),
       "natsOptions_SetErrorHandler"},
      {options.retry_on_failed_connect ? natsOptions_SetRetryOnFailedConnect(conn.opts_, true, nullptr, nullptr)
                                       : NATS_OK,
       "natsOptions_SetRetryOnFailedConnect"},
  };
  for (const Step& step : steps) {
    if (step.status != NATS_OK) return nats_error(step.status, step.what);
  }
  // NOTE: a nonce signature the signer refused (libnats < 3.10 would drop it, see
  // nats_nonce_signer.h) fails this connection only: a new one gets a new nonce. 8 refusals in a row
  // happen once in 256^8 connects; a real refusal by the server is not retried.
  constexpr int kConnectAttempts = 8;
  for (int attempt = 1;; ++attempt) {
    s = natsConnection_Connect(&conn.nc_, conn.opts_);
    if (s == NATS_OK || conn.signer_ == nullptr || conn.signer_->take_refused() == 0) break;
    if (attempt == kConnectAttempts) break;
  }
  if (s == NATS_NOT_YET_CONNECTED && options.retry_on_failed_connect) return conn;
  if (s != NATS_OK) {
    BusError error = nats_error(s, "connect to " + redact_url(options.url));
    // NOTE: a server with `verify: true` closes a TLS connection that shows no client certificate
    // (or one it does not trust) right after the handshake; nats.c then reports a protocol error
    // ("Expected 'PONG', got ''"). Say what it means, and count it as refused (exit 4 in the CLI).
    if (s == NATS_PROTOCOL_ERROR && (options.auth.tls() || options.url.find("tls://") != std::string::npos)) {
      error.status = NATS_SSL_ERROR;
      error.message += options.auth.tls_cert.empty()
                           ? ": the server closed the TLS connection: it requires a client certificate "
                             "(give --tlscert and --tlskey)"
                           : ": the server closed the TLS connection: it did not accept the client certificate";
    }
    return error;
  }
  return conn;
}

bool Connection::connected() const {
  return nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED;
}

bool Connection::closed() const { return nc_ != nullptr && natsConnection_IsClosed(nc_); }

std::size_t Connection::known_servers() const {
  if (nc_ == nullptr) return 0;
  char** servers = nullptr;
  int count = 0;
  if (natsConnection_GetServers(nc_, &servers, &count) != NATS_OK) return 0;
  for (int i = 0; i < count; ++i) std::free(servers[i]);
  std::free(static_cast<void*>(servers));
  return static_cast<std::size_t>(count);
}

std::int64_t Connection::max_payload() const { return nc_ ? natsConnection_GetMaxPayload(nc_) : 0; }

BusStatus Connection::publish(std::string_view subject, std::string_view data) {
  const std::string subj(subject);
  natsStatus s = natsConnection_Publish(nc_, subj.c_str(), data.data(), static_cast<int>(data.size()));
  if (s != NATS_OK) return nats_error(s, "publish to " + subj);
  return {};
}

BusStatus Connection::publish(Message& message) {
  natsStatus s = natsConnection_PublishMsg(nc_, message.raw());
  if (s != NATS_OK) return nats_error(s, "publish to " + std::string(message.subject()));
  return {};
}

BusResult<Message> Connection::request(std::string_view subject, std::string_view data, std::int64_t timeout_ms) {
  const std::string subj(subject);
  natsMsg* reply = nullptr;
  natsStatus s =
      natsConnection_Request(&reply, nc_, subj.c_str(), data.data(), static_cast<int>(data.size()), timeout_ms);
  if (s != NATS_OK) return nats_error(s, "request on " + subj);
  return Message(reply);
}

BusStatus Connection::flush(std::int64_t timeout_ms) {
  natsStatus s = natsConnection_FlushTimeout(nc_, timeout_ms);
  if (s != NATS_OK) return nats_error(s, "flush");
  return {};
}

BusResult<Subscription> Connection::subscribe(std::string_view subject, MessageHandler handler) {
  return queue_subscribe(subject, {}, std::move(handler));
}

BusResult<Subscription> Connection::queue_subscribe(std::string_view subject, std::string_view queue,
                                                    MessageHandler handler) {
  return Subscription::make_async(nc_, subject, queue, std::move(handler));
}

BusResult<Subscription> Connection::subscribe_sync(std::string_view subject) {
  const std::string subj(subject);
  Subscription sub;
  natsStatus s = natsConnection_SubscribeSync(&sub.sub_, nc_, subj.c_str());
  if (s != NATS_OK) return nats_error(s, "subscribe to " + subj);
  return sub;
}

std::string Connection::new_inbox() const {
  natsInbox* inbox = nullptr;
  // NOTE: natsInbox_Create always says "_INBOX.<nuid>"; the unique part is kept under our prefix,
  // so subscriptions stay inside what a least-privilege user may subscribe to.
  if (natsInbox_Create(&inbox) != NATS_OK) return inbox_prefix_ + ".kvidx";
  std::string out(inbox);
  natsInbox_Destroy(inbox);
  constexpr std::string_view kDefault = "_INBOX";
  if (inbox_prefix_ != kDefault && out.rfind(kDefault, 0) == 0) out = inbox_prefix_ + out.substr(kDefault.size());
  return out;
}

BusError Connection::last_error() const {
  if (nc_ == nullptr) return BusError{NATS_OK, ""};
  const char* text = nullptr;
  const natsStatus s = natsConnection_GetLastError(nc_, &text);
  return BusError{s, text != nullptr ? std::string(text) : std::string()};
}

}  // namespace kvidx::bus
