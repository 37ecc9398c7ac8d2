#include "libbus/stream_replicas.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace kvidx::bus {

int auto_stream_replicas(std::size_t known_servers) { return known_servers >= 3 ? 3 : 1; }

StreamSpec with_replicas(StreamSpec spec, int configured, std::size_t known_servers) {
  spec.replicas = configured;
  spec.new_replicas = configured > 0 ? configured : auto_stream_replicas(known_servers);
  return spec;
}

std::string log_stream_replicas(const StreamSpec& spec, const StreamState& state, std::size_t known_servers) {
  std::string line;
  if (state.previous_replicas == 0) {
    line = fmt::format("created stream {} with {} replica(s) ({}; {} NATS server(s) known)", spec.name, state.replicas,
                       spec.replicas > 0 ? "--stream-replicas" : "automatic", known_servers);
    spdlog::info("{}", line);
  } else if (state.previous_replicas != state.replicas) {
    line = fmt::format(
        "stream {}: replicas {} -> {} (--stream-replicas {}); JetStream copies the messages to the "
        "new replicas in the background",
        spec.name, state.previous_replicas, state.replicas, spec.replicas);
    spdlog::warn("{}", line);
  } else if (spec.replicas == 0 && state.replicas != spec.new_replicas) {
    line = fmt::format(
        "stream {} has {} replica(s), kept; with {} NATS server(s) known the automatic count is {}: "
        "run once with --stream-replicas {} to change it",
        spec.name, state.replicas, known_servers, spec.new_replicas, spec.new_replicas);
    spdlog::warn("{}", line);
  }
  return line;
}

}  // namespace kvidx::bus
