#include "tests/support/nats_cluster.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <thread>

#include "tests/support/http_probe.h"
#include "tests/support/wait_until.h"

namespace kvidx::testing {
namespace {

using Json = nlohmann::json;

std::optional<Json> get_json(int port, const std::string& path) {
  const auto reply = http_get(port, path, std::chrono::milliseconds(1000));
  if (!reply || reply->status != 200) return std::nullopt;
  Json parsed = Json::parse(reply->body, nullptr, false);
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

}  // namespace

NatsCluster::NatsCluster(int nodes, const std::string& config_text) {
  for (int i = 0; i < nodes; ++i) {
    monitor_ports_.push_back(find_free_port());
    route_ports_.push_back(find_free_port());
  }
  std::string routes;
  for (int port : route_ports_) routes += (routes.empty() ? "" : ",") + ("nats://127.0.0.1:" + std::to_string(port));
  for (int i = 0; i < nodes; ++i) {
    // NOTE: every node lists every route, itself included (nats-server ignores a route to itself),
    // so any node restarted alone finds the others.
    NatsServerOptions options = NatsServerOptions::with_args(
        {"--server_name", name(i), "--cluster_name", "kvidx-test", "--cluster",
         "nats://127.0.0.1:" + std::to_string(route_ports_[static_cast<std::size_t>(i)]), "--routes", routes, "-m",
         std::to_string(monitor_ports_[static_cast<std::size_t>(i)])});
    options.config_text = config_text;
    nodes_.push_back(std::make_unique<NatsServer>(options));
  }
  if (!wait_healthy(std::chrono::seconds(30)))
    throw std::runtime_error("nats cluster: no JetStream meta leader in 30 s");
}

std::string NatsCluster::urls() const {
  std::string out;
  for (const auto& node : nodes_) out += (out.empty() ? "" : ",") + node->url();
  return out;
}

void NatsCluster::kill9(int index) { node(index).kill9(); }

void NatsCluster::restart(int index) { node(index).restart(); }

bool NatsCluster::wait_healthy(std::chrono::milliseconds limit) {
  return wait_until(
      [&] {
        for (int i = 0; i < size(); ++i) {
          if (!node(i).running()) continue;
          const auto health = http_get(monitor_port(i), "/healthz?js-enabled-only=true");
          if (!health || health->status != 200) return false;
          const auto jsz = get_json(monitor_port(i), "/jsz");
          if (!jsz || jsz->value("/meta_cluster/leader"_json_pointer, std::string()).empty()) return false;
        }
        return true;
      },
      limit, std::chrono::milliseconds(50));
}

std::optional<int> NatsCluster::stream_leader(const std::string& stream) {
  for (int i = 0; i < size(); ++i) {
    if (!node(i).running()) continue;
    const auto jsz = get_json(monitor_port(i), "/jsz?accounts=true&streams=true");
    if (!jsz || !jsz->contains("account_details")) continue;
    for (const Json& account : jsz->at("account_details")) {
      for (const Json& detail : account.value("stream_detail", Json::array())) {
        if (detail.value("name", std::string()) != stream) continue;
        const std::string leader = detail.value("/cluster/leader"_json_pointer, std::string());
        for (int j = 0; j < size(); ++j) {
          if (name(j) == leader && node(j).running()) return j;
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<int> NatsCluster::wait_stream_leader(const std::string& stream, std::chrono::milliseconds limit) {
  std::optional<int> leader;
  wait_until(
      [&] {
        leader = stream_leader(stream);
        return leader.has_value();
      },
      limit, std::chrono::milliseconds(50));
  return leader;
}

}  // namespace kvidx::testing
