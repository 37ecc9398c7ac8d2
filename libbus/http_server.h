// Minimal HTTP/1.1 server for /metrics and /healthz (Boost.Asio + Beast, one I/O thread).
// Asio/Beast stay inside http_server.cpp; this header is cheap to include.
#pragma once

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

class HttpServer {
 public:
  HttpServer(HttpHandler handler);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds "host:port" (port 0 picks a free one) and starts serving; false with `error` set on failure.
  bool start(const std::string& host, std::uint16_t port, std::string& error);
  std::uint16_t port() const;
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits "127.0.0.1:9464" into host and port; false when malformed.
bool parse_host_port(std::string_view text, std::string& host, std::uint16_t& port);

}  // namespace kvidx::bus
