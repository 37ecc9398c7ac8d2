// Test fixture: a real 3-node (or N-node) nats-server cluster on loopback, JetStream on. Each node
// is a NatsServer (nats_server.h: its own free client port, temp store dir, stopped by PID) started
// with a server_name (n0, n1, ...), a cluster listener on a free port with routes to every node, one
// cluster name, and a monitoring port used for readiness (/healthz, /jsz) and to find a stream's
// leader. Nodes can be killed (SIGKILL) and restarted on the same ports and store by index.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/nats_server.h"

namespace kvidx::testing {

class NatsCluster {
 public:
  // Starts `nodes` servers and waits until every one reports JetStream healthy and the same meta
  // leader; throws std::runtime_error when that does not happen in time.
  // `config_text`: extra lines of every node's config file (e.g. the shards' events `mappings`).
  explicit NatsCluster(int nodes = 3, const std::string& config_text = {});
  ~NatsCluster() = default;
  NatsCluster(const NatsCluster&) = delete;
  NatsCluster& operator=(const NatsCluster&) = delete;

  int size() const { return static_cast<int>(nodes_.size()); }
  NatsServer& node(int index) { return *nodes_.at(static_cast<std::size_t>(index)); }
  std::string name(int index) const { return "n" + std::to_string(index); }
  int monitor_port(int index) const { return monitor_ports_.at(static_cast<std::size_t>(index)); }
  // Every node's client URL, comma-separated (what `kvidx serve --nats` takes).
  std::string urls() const;

  void kill9(int index);    // SIGKILL that node
  void restart(int index);  // start it again on the same ports and store (no readiness wait)

  // Waits until every running node answers /healthz?js-enabled-only=true with 200 and knows a
  // JetStream meta leader. False when that does not happen within `limit`.
  bool wait_healthy(std::chrono::milliseconds limit = std::chrono::seconds(20));
  // Index of the node leading `stream` (as the running nodes' /jsz report it), nullopt when none
  // reports a leader.
  std::optional<int> stream_leader(const std::string& stream);
  // Waits until `stream` has a leader on a running node; nullopt on timeout.
  std::optional<int> wait_stream_leader(const std::string& stream,
                                        std::chrono::milliseconds limit = std::chrono::seconds(15));

 private:
  std::vector<std::unique_ptr<NatsServer>> nodes_;
  std::vector<int> monitor_ports_;
  std::vector<int> route_ports_;
};

}  // namespace kvidx::testing
