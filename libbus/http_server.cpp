#include "libbus/http_server.h"

// NOTE: <utility> first: Boost 1.74 Asio with GCC 12 in C++20 needs std::exchange declared.
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>
#include <chrono>
#include <thread>

namespace kvidx::bus {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::Impl {
  explicit Impl(HttpHandler h) : handler(std::move(h)) {}

  HttpHandler handler;
  asio::io_context io{1};
  std::optional<tcp::acceptor> acceptor;
  std::thread thread;
  std::uint16_t bound_port = 0;

  asio::awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    try {
      for (;;) {
        stream.expires_after(std::chrono::seconds(30));
        http::request<http::string_body> req;
        co_await http::async_read(stream, buffer, req, asio::use_awaitable);
        HttpResponse out;
        try {
          out = handler(std::string_view(req.method_string().data(), req.method_string().size()),
                        std::string_view(req.target().data(), req.target().size()));
        } catch (const std::exception& e) {
          out = HttpResponse{500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
        }
        http::response<http::string_body> res{static_cast<http::status>(out.status), req.version()};
        res.set(http::field::server, "kvidx");
        res.set(http::field::content_type, out.content_type);
        res.keep_alive(req.keep_alive());
        res.body() = std::move(out.body);
        res.prepare_payload();
        const bool keep = res.keep_alive();
        co_await http::async_write(stream, res, asio::use_awaitable);
        if (!keep) break;
      }
    } catch (const std::exception&) {
      // Client went away, timed out or sent garbage: just drop the connection.
    }
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      tcp::socket socket = co_await acceptor->async_accept(asio::use_awaitable);
      asio::co_spawn(io, session(std::move(socket)), asio::detached);
    }
  }
};

HttpServer::HttpServer(HttpHandler handler) : impl_(std::make_unique<Impl>(std::move(handler))) {}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::start(const std::string& host, std::uint16_t port, std::string& error) {
  try {
    tcp::endpoint endpoint(asio::ip::make_address(host), port);
    impl_->acceptor.emplace(impl_->io);
    impl_->acceptor->open(endpoint.protocol());
    impl_->acceptor->set_option(asio::socket_base::reuse_address(true));
    impl_->acceptor->bind(endpoint);
    impl_->acceptor->listen();
    impl_->bound_port = impl_->acceptor->local_endpoint().port();
  } catch (const std::exception& e) {
    error = e.what();
    impl_->acceptor.reset();
    return false;
  }
  asio::co_spawn(impl_->io, impl_->accept_loop(), [](std::exception_ptr) {});
  impl_->thread = std::thread([impl = impl_.get()] {
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      spdlog::error("HTTP server stopped: {}", e.what());
    }
  });
  return true;
}

std::uint16_t HttpServer::port() const { return impl_->bound_port; }

void HttpServer::stop() {
  if (!impl_) return;
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool parse_host_port(std::string_view text, std::string& host, std::uint16_t& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 >= text.size()) return false;
  const std::string_view digits = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || value > 65535) return false;
  host = std::string(text.substr(0, colon));
  port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace kvidx::bus
