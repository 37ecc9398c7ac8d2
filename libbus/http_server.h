// Minimal HTTP/1.1 server for /metrics, /healthz and /readyz (Boost.Asio + Beast, one I/O thread).
// Asio/Beast stay inside http_server.cpp; this header is cheap to include.
//
// It keeps answering whatever happens to its clients: a failed accept (EMFILE / ENFILE when the
// process is out of file descriptors, ECONNABORTED, ...) is counted, logged (at most every 10 s,
// and once more when accepting works again) and retried after a short back-off, never ending the
// accept loop; at most `max_connections` are open at once (at the bound, the oldest connection
// waiting for a request is closed to make room); a connection with no complete request or
// response for `idle_timeout` is closed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kvidx::bus {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called on the server's I/O thread for every request; must be thread-safe w.r.t. the service.
using HttpHandler = std::function<HttpResponse(std::string_view method, std::string_view target)>;

class Counter;

struct HttpServerOptions {
  std::size_t max_connections = 64;
  std::chrono::milliseconds idle_timeout{15000};
  Counter* accept_errors = nullptr;  // optional: also counted here (kvidx_http_accept_errors_total)
};

class HttpServer {
 public:
  explicit HttpServer(HttpHandler handler, HttpServerOptions options = {});
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds "host:port" (port 0 picks a free one) and starts serving; false with `error` set on failure.
  bool start(const std::string& host, std::uint16_t port, std::string& error);
  std::uint16_t port() const;
  void stop();

  std::uint64_t accept_errors() const;  // failed accepts since start
  std::size_t open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits "127.0.0.1:9464" into host and port; false when malformed.
bool parse_host_port(std::string_view text, std::string& host, std::uint16_t& port);

}  // namespace kvidx::bus
