// What the cluster tests ask every kvidx replica at once: kv.admin.replicas, answered by each
// replica on a plain subscription (not the queue group), collected on one inbox.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/subjects.h"
#include "tests/faults/fault_support.h"

namespace kvidx::faults {

// Every replica's kv.admin.replicas answer collected for `window` (or until `expect` answers came;
// 0: the whole window).
inline std::vector<Json> replica_answers(bus::Connection& conn, std::chrono::milliseconds window,
                                         std::size_t expect = 0) {
  const std::string inbox = conn.new_inbox();
  auto sub = conn.subscribe_sync(inbox);
  REQUIRE(sub.ok());
  auto request = bus::Message::create(bus::Subjects().admin_replicas(), R"({"digest":"total"})", inbox);
  REQUIRE(request.ok());
  REQUIRE(conn.publish(request.value()).ok());
  std::vector<Json> out;
  const auto deadline = Clock::now() + window;
  while (Clock::now() < deadline) {
    auto msg = sub.value().next(std::max<std::int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
    if (!msg.ok()) break;
    out.push_back(Json::parse(msg.value().data()));
    if (out.size() == expect) break;
  }
  return out;
}

}  // namespace kvidx::faults
