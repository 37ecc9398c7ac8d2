// Plain-socket HTTP/1.0 probes of kvidx's /metrics listener from tests (no client library): every
// call is bounded in time and talks to 127.0.0.1 only.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace kvidx::testing {

struct HttpReply {
  int status = 0;
  std::string body;
};

// A TCP connection to 127.0.0.1:port, or -1. The caller closes it.
int connect_loopback(int port);

// GET `path` (HTTP/1.0, connection closed after the reply); nullopt when no complete reply came
// within `timeout`.
std::optional<HttpReply> http_get(int port, const std::string& path,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

// True when the peer closed `fd` (a read returns 0 or an error) within `timeout`.
bool closed_by_peer(int fd, std::chrono::milliseconds timeout);

}  // namespace kvidx::testing
