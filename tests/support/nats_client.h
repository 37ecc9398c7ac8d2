// connect_to: a test's client connection to the harness's nats-server (tests/support/nats_server.h),
// REQUIREd to succeed. Header-only; for test targets that link kvidx::bus.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "libbus/nats_connection.h"
#include "tests/support/nats_server.h"

namespace kvidx::testing {

inline bus::Connection connect_to(const NatsServer& server, std::string name = "kvidx-test", bool send_asap = false) {
  bus::ConnectionOptions options;
  options.url = server.url();
  options.name = std::move(name);
  options.send_asap = send_asap;
  auto conn = bus::Connection::connect(options);
  REQUIRE_MESSAGE(conn.ok(), conn.error().message);
  return std::move(conn).value();
}

}  // namespace kvidx::testing
