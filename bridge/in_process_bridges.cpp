#include "bridge/in_process_bridges.h"

#include <utility>

namespace kvidx::bridge {

InProcessBridges::InProcessBridges(bus::KvidxService& service, std::vector<ZmqBridgeConfig> sources)
    : sources_(std::move(sources)), sink_(service) {
  bridges_.reserve(sources_.size());
  for (const ZmqBridgeConfig& source : sources_) bridges_.push_back(std::make_unique<ZmqEventBridge>(source, sink_));
}

InProcessBridges::~InProcessBridges() { stop(); }

SinkStatus InProcessBridges::start() {
  for (std::size_t i = 0; i < bridges_.size(); ++i) {
    if (auto started = bridges_[i]->start(); !started) {
      stop();
      return SinkStatus(sources_[i].endpoint + ": " + started.error());
    }
  }
  return {};
}

void InProcessBridges::stop() {
  for (auto& bridge : bridges_) bridge->stop();
}

std::vector<ZmqBridgeStats> InProcessBridges::stats() const {
  std::vector<ZmqBridgeStats> out;
  out.reserve(bridges_.size());
  for (const auto& bridge : bridges_) out.push_back(bridge->stats());
  return out;
}

}  // namespace kvidx::bridge
