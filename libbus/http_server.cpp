#include "libbus/http_server.h"

// NOTE: <utility> first: Boost 1.74 Asio with GCC 12 in C++20 needs std::exchange declared.
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <charconv>
#include <chrono>
#include <list>
#include <optional>
#include <thread>

#include "libbus/log_rate_limiter.h"
#include "libbus/metrics.h"
#include "libindexer/thread_name.h"

namespace kvidx::bus {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::Impl {
  Impl(HttpHandler h, HttpServerOptions o) : handler(std::move(h)), options(o) {
    if (options.max_connections == 0) options.max_connections = 1;
  }

  HttpHandler handler;
  HttpServerOptions options;
  asio::io_context io{1};
  std::optional<tcp::acceptor> acceptor;
  std::thread thread;
  std::uint16_t bound_port = 0;
  std::atomic<std::uint64_t> accept_errors{0};
  std::atomic<std::size_t> open{0};
  LogRateLimiter accept_error_log;  // one kind: "accept"

  // Open connections, oldest first; touched only on the I/O thread.
  struct Connection {
    beast::tcp_stream* stream = nullptr;
    bool waiting_for_request = true;
  };
  std::list<Connection> connections;
  std::size_t evicting = 0;  // evicted, their sessions not yet ended
  // The accept loop waits on this while every slot is taken by a busy connection; a session
  // ending cancels it.
  std::optional<asio::steady_timer> slot_free;

  asio::awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    const auto self = connections.insert(connections.end(), Connection{&stream, true});
    open.store(connections.size(), std::memory_order_relaxed);
    beast::flat_buffer buffer;
    try {
      for (;;) {
        // NOTE: the timeout covers the whole request, so neither an idle keep-alive connection
        // nor one trickling bytes holds a slot longer than idle_timeout.
        self->waiting_for_request = true;
        stream.expires_after(options.idle_timeout);
        http::request<http::string_body> req;
        co_await http::async_read(stream, buffer, req, asio::use_awaitable);
        self->waiting_for_request = false;
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
        stream.expires_after(options.idle_timeout);
        co_await http::async_write(stream, res, asio::use_awaitable);
        if (!keep) break;
      }
    } catch (const std::exception&) {
      // Client went away, timed out, was evicted or sent garbage: just drop the connection.
    }
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.socket().close(ec);
    if (self->stream == nullptr) --evicting;
    connections.erase(self);
    open.store(connections.size(), std::memory_order_relaxed);
    if (slot_free) slot_free->cancel();
  }

  // At the connection bound: closes the oldest connection waiting for a request (its session then
  // ends). False when every connection is busy with a request.
  bool evict_one() {
    for (Connection& c : connections) {
      if (c.waiting_for_request && c.stream != nullptr) {
        beast::error_code ec;
        c.stream->socket().close(ec);  // its pending read completes with an error; the session ends
        c.stream = nullptr;
        ++evicting;
        return true;
      }
    }
    return false;
  }

  asio::awaitable<void> accept_loop() {
    asio::steady_timer backoff_timer(io);
    slot_free.emplace(io);
    constexpr std::chrono::milliseconds kMinBackoff{10};
    constexpr std::chrono::milliseconds kMaxBackoff{1000};
    std::chrono::milliseconds backoff = kMinBackoff;
    std::uint64_t failed_in_row = 0;
    for (;;) {
      boost::system::error_code ec;
      if (connections.size() - evicting >= options.max_connections && !evict_one()) {
        slot_free->expires_at(asio::steady_timer::time_point::max());
        co_await slot_free->async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      tcp::socket socket = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
      if (ec) {
        // NOTE: out of file descriptors (EMFILE / ENFILE) the pending connection stays queued and
        // the listener keeps reporting it; without the back-off this would spin.
        accept_errors.fetch_add(1, std::memory_order_relaxed);
        if (options.accept_errors != nullptr) options.accept_errors->inc();
        ++failed_in_row;
        if (const auto v = accept_error_log.admit("accept"); v.log) {
          spdlog::warn("HTTP accept failed: {} ({} open connection(s)){}; retrying", ec.message(), connections.size(),
                       suppressed_note(v));
        }
        backoff_timer.expires_after(backoff);
        co_await backoff_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        backoff = std::min(backoff * 2, kMaxBackoff);
        continue;
      }
      if (failed_in_row > 0) {
        spdlog::info("HTTP accepting again after {} failed accept(s)", failed_in_row);
        failed_in_row = 0;
        backoff = kMinBackoff;
      }
      asio::co_spawn(io, session(std::move(socket)), asio::detached);
    }
  }
};

HttpServer::HttpServer(HttpHandler handler, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(handler), options)) {}

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
  asio::co_spawn(impl_->io, impl_->accept_loop(), [](const std::exception_ptr&) {});
  impl_->thread = named_thread("kvidx-http", [impl = impl_.get()] {
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      spdlog::error("HTTP server stopped: {}", e.what());
    }
  });
  return true;
}

std::uint16_t HttpServer::port() const { return impl_->bound_port; }
std::uint64_t HttpServer::accept_errors() const { return impl_->accept_errors.load(std::memory_order_relaxed); }
std::size_t HttpServer::open_connections() const { return impl_->open.load(std::memory_order_relaxed); }

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
