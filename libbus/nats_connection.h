// Owning wrapper for a natsConnection and its natsOptions. One Connection per role: bulk
// ingest (default buffered publishes) and low-latency responders (send_asap) should not share.
// The Connection must outlive every Subscription and JetStream context made from it.
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "libbus/nats_error.h"
#include "libbus/nats_message.h"
#include "libbus/nats_subscription.h"

namespace kvidx::bus {

// How a connection authenticates and encrypts: the nats CLI's options. Secrets (password, token,
// the seeds inside the files) live only here and in nats.c; nothing in kvidx logs or prints them
// (describe_auth() says what is set without the values).
struct NatsAuth {
  std::string creds_file;      // user JWT + nkey seed (.creds): decentralised (operator/account) auth
  std::string nkey_seed_file;  // a user nkey seed ("SU..."); the public key is derived from it
  std::string user;            // with password
  std::string password;        // secret
  std::string token;           // secret
  std::string tls_cert;        // client certificate (mutual TLS), with tls_key
  std::string tls_key;
  std::string tls_ca;          // CA bundle that signs the server's certificate
  bool tls_first = false;      // TLS before the server's INFO: not supported by libnats 3.4.1
  std::string inbox_prefix;    // replies and pull consumers use <prefix>.<id> instead of _INBOX.<id>

  bool tls() const { return !tls_cert.empty() || !tls_key.empty() || !tls_ca.empty() || tls_first; }
};

// "user kvidx, password (set), tls ca /etc/ca.pem, ..." without any secret; "none" when empty.
std::string describe_auth(const NatsAuth& auth);

struct ConnectionOptions {
  // One URL or a comma-separated list (a cluster: nats.c picks one and fails over to the others).
  // tls:// URLs require TLS. Credentials in a URL (nats://user:password@host) work but show in `ps`
  // when given as a flag: prefer auth or $NATS_URL.
  std::string url = "nats://127.0.0.1:4222";
  NatsAuth auth;
  std::string name = "kvidx";
  // Flush every publish immediately (responders: ~0.3 ms instead of ~1.1 ms per request/reply).
  bool send_asap = false;
  // Keep reconnecting forever by default: a service should ride out a server restart.
  int max_reconnect = -1;
  std::int64_t reconnect_wait_ms = 250;
  std::int64_t connect_timeout_ms = 2000;
  // Retry the initial connect in the background instead of failing when the server is down.
  bool retry_on_failed_connect = false;
};

class Connection {
 public:
  Connection() = default;
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  static BusResult<Connection> connect(const ConnectionOptions& options);

  bool valid() const { return nc_ != nullptr; }
  bool connected() const;
  // Closed for good (by close, by the server for a protocol violation, or reconnects exhausted).
  bool closed() const;
  // The server's max_payload (bytes) for this connection.
  std::int64_t max_payload() const;

  BusStatus publish(std::string_view subject, std::string_view data);
  BusStatus publish(Message& message);  // with headers; the message stays owned by the caller
  BusResult<Message> request(std::string_view subject, std::string_view data, std::int64_t timeout_ms);
  BusStatus flush(std::int64_t timeout_ms = 5000);

  // Async subscription: `handler` runs on a nats.c delivery thread, one message at a time.
  BusResult<Subscription> subscribe(std::string_view subject, MessageHandler handler);
  BusResult<Subscription> queue_subscribe(std::string_view subject, std::string_view queue, MessageHandler handler);
  // Sync subscription, polled with Subscription::next().
  BusResult<Subscription> subscribe_sync(std::string_view subject);
  // A fresh inbox subject under the connection's inbox prefix (_INBOX by default).
  std::string new_inbox() const;
  // nats.c's last error on this connection (e.g. a permissions violation the server reported
  // asynchronously): status and text, NATS_OK when none.
  BusError last_error() const;

  natsConnection* raw() const { return nc_; }

 private:
  void reset() noexcept;

  natsConnection* nc_ = nullptr;
  natsOptions* opts_ = nullptr;
  std::string inbox_prefix_ = "_INBOX";
};

}  // namespace kvidx::bus
