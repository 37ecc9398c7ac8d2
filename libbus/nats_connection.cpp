#include "libbus/nats_connection.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <utility>

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
void on_async_error(natsConnection*, natsSubscription*, natsStatus err, void*) {
  spdlog::warn("NATS async error: {}", natsStatus_GetText(err));
}

}  // namespace

Connection::Connection(Connection&& other) noexcept
    : nc_(std::exchange(other.nc_, nullptr)), opts_(std::exchange(other.opts_, nullptr)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    reset();
    nc_ = std::exchange(other.nc_, nullptr);
    opts_ = std::exchange(other.opts_, nullptr);
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
}

BusResult<Connection> Connection::connect(const ConnectionOptions& options) {
  Connection conn;
  natsStatus s = natsOptions_Create(&conn.opts_);
  if (s != NATS_OK) return nats_error(s, "natsOptions_Create");
  struct Step {
    natsStatus status;
    const char* what;
  };
  const Step steps[] = {
      {natsOptions_SetURL(conn.opts_, options.url.c_str()), "natsOptions_SetURL"},
      {natsOptions_SetName(conn.opts_, options.name.c_str()), "natsOptions_SetName"},
      {natsOptions_SetSendAsap(conn.opts_, options.send_asap), "natsOptions_SetSendAsap"},
      {natsOptions_SetMaxReconnect(conn.opts_, options.max_reconnect), "natsOptions_SetMaxReconnect"},
      {natsOptions_SetReconnectWait(conn.opts_, options.reconnect_wait_ms), "natsOptions_SetReconnectWait"},
      {natsOptions_SetTimeout(conn.opts_, options.connect_timeout_ms), "natsOptions_SetTimeout"},
      {natsOptions_SetDisconnectedCB(conn.opts_, on_disconnected, nullptr), "natsOptions_SetDisconnectedCB"},
      {natsOptions_SetReconnectedCB(conn.opts_, on_reconnected, nullptr), "natsOptions_SetReconnectedCB"},
      {natsOptions_SetErrorHandler(conn.opts_, on_async_error, nullptr), "natsOptions_SetErrorHandler"},
      {options.retry_on_failed_connect ? natsOptions_SetRetryOnFailedConnect(conn.opts_, true, nullptr, nullptr)
                                       : NATS_OK,
       "natsOptions_SetRetryOnFailedConnect"},
  };
  for (const Step& step : steps) {
    if (step.status != NATS_OK) return nats_error(step.status, step.what);
  }
  s = natsConnection_Connect(&conn.nc_, conn.opts_);
  if (s == NATS_NOT_YET_CONNECTED && options.retry_on_failed_connect) return conn;
  if (s != NATS_OK) return nats_error(s, "connect to " + redact_url(options.url));
  return conn;
}

bool Connection::connected() const { return nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED; }

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
  natsStatus s = natsConnection_Request(&reply, nc_, subj.c_str(), data.data(), static_cast<int>(data.size()), timeout_ms);
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
  if (natsInbox_Create(&inbox) != NATS_OK) return "_INBOX.kvidx";
  std::string out(inbox);
  natsInbox_Destroy(inbox);
  return out;
}

}  // namespace kvidx::bus
