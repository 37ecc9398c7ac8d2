// Owning wrapper for a natsConnection and its natsOptions. One Connection per role: bulk
// ingest (default buffered publishes) and low-latency responders (send_asap) should not share.
// The Connection must outlive every Subscription and JetStream context made from it.
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "libbus/nats_auth.h"
#include "libbus/nats_error.h"
#include "libbus/nats_message.h"
#include "libbus/nats_nonce_signer.h"
#include "libbus/nats_subscription.h"

namespace kvidx::bus {

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
  // Log the server's asynchronous errors (permission violations, slow consumer) as warnings. The
  // CLI's one-shot commands turn it off and report last_error() in their own one-line message.
  bool log_async_errors = true;
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
  // Servers this connection knows: the URLs it was given plus those the cluster advertised (the
  // INFO protocol's connect_urls), each once. 1 for a single server.
  std::size_t known_servers() const;
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
  // Signs the nonce for --nkey/--creds; outlives nc_ and opts_, which point to it (reset() order).
  std::unique_ptr<NonceSigner> signer_;
  std::string inbox_prefix_ = "_INBOX";
};

}  // namespace kvidx::bus
