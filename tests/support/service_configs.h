// The ServiceConfig the service tests start from: the harness's nats-server, a durable consumer
// of the test's own (a test reusing one resumes where the last service acked), no periodic
// snapshots (a test snapshots when it means to), and fetches of 500 messages.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "libbus/service.h"
#include "tests/support/nats_server.h"

namespace kvidx::testing {

inline bus::ServiceConfig service_config_for(const NatsServer& server, std::string durable, std::size_t lanes = 2,
                                             bus::IngestMode mode = bus::IngestMode::jetstream) {
  bus::ServiceConfig c;
  c.nats_url = server.url();
  c.mode = mode;
  c.lanes = lanes;
  c.durable = std::move(durable);
  c.snapshot_interval = std::chrono::milliseconds(0);
  c.fetch_batch = 500;
  return c;
}

}  // namespace kvidx::testing
