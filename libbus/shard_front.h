// ShardFront: the merging front of a sharded deployment (`kvidx serve --front N`). It indexes
// nothing: it answers <prefix>.query.scores (queue group "kvidx", where routers and `kvidx score`
// ask) by scattering each query to the N shards and merging their replies (shard_scatter.h), so a
// router sees one unsharded kvidx. Run several fronts for availability: they share the queue group.
// kv.admin.stats / workers / dump get an error reply naming where to ask instead (a shard's
// <prefix>.shard.I.admin.*, or kv.admin.replicas: `kvidx stats --all`).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "libbus/bus_error.h"
#include "libbus/nats_auth.h"

namespace kvidx::bus {

class MetricsRegistry;

struct FrontConfig {
  std::string nats_url = "nats://127.0.0.1:4222";
  NatsAuth nats_auth;
  std::string subject_prefix = "kv";
  std::uint32_t shards = 1;
  std::chrono::milliseconds shard_timeout{2000};  // per query, shard retries included
  int shard_retries = 2;
};

class ShardFront {
 public:
  explicit ShardFront(FrontConfig config);
  ~ShardFront();
  ShardFront(const ShardFront&) = delete;
  ShardFront& operator=(const ShardFront&) = delete;

  BusStatus start();     // connects, subscribes
  void stop();           // unsubscribes, fails what is in flight, closes
  bool healthy() const;  // connected (or reconnecting), not stopped
  MetricsRegistry& metrics();
  std::string render_metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvidx::bus
