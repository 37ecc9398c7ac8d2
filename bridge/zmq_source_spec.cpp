#include "bridge/zmq_source_spec.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace kvidx::bridge {
namespace {

template <class Int>
bool parse_int(std::string_view text, Int& out) {
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return false;
  out = value;
  return true;
}

bool parse_bool(std::string_view text, bool& out) {
  if (text.empty() || text == "true" || text == "1") {
    out = true;
  } else if (text == "false" || text == "0") {
    out = false;
  } else {
    return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

Decoded<ZmqBridgeConfig> parse_zmq_source_spec(std::string_view spec) {
  ZmqBridgeConfig config;
  std::vector<std::string_view> parts;
  for (std::size_t start = 0; start <= spec.size();) {
    const std::size_t comma = std::min(spec.find(',', start), spec.size());
    parts.push_back(trim(spec.substr(start, comma - start)));
    start = comma + 1;
  }
  if (parts.empty() || parts[0].find("://") == std::string_view::npos || parts[0].find('=') != std::string_view::npos) {
    return CodecError{"endpoint", "expected the engine's ZMQ endpoint first, e.g. tcp://127.0.0.1:5557"};
  }
  config.endpoint = std::string(parts[0]);
  std::set<std::string> seen;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].empty()) continue;
    const std::size_t eq = parts[i].find('=');
    std::string key(parts[i].substr(0, eq));
    std::replace(key.begin(), key.end(), '_', '-');
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : parts[i].substr(eq + 1);
    const bool has_value = eq != std::string_view::npos;
    if (!seen.insert(key).second) return CodecError{key, "given twice"};
    auto bad = [&](std::string_view what) {
      return CodecError{key, "expected " + std::string(what) + ", got '" + std::string(value) + "'"};
    };
    if (key == "worker") {
      if (!parse_int(value, config.conversion.worker_id)) return bad("an unsigned 64-bit worker id");
    } else if (key == "block-size") {
      if (!parse_int(value, config.conversion.block_size) || config.conversion.block_size == 0) {
        return bad("a positive block size");
      }
    } else if (key == "dp-rank") {
      if (!parse_int(value, config.conversion.default_dp_rank)) return bad("a rank in [0, 2^32)");
    } else if (key == "replay") {
      if (value.find("://") == std::string_view::npos) return bad("a ZMQ endpoint");
      config.replay_endpoint = std::string(value);
    } else if (key == "topic") {
      config.topic = std::string(value);
    } else if (key == "cache-namespace") {
      config.conversion.cache_namespace = std::string(value);
    } else if (key == "eagle") {
      if (!parse_bool(value, config.conversion.eagle)) return bad("true or false");
    } else if (key == "clear-on-gap") {
      if (!parse_bool(value, config.clear_on_gap)) return bad("true or false");
    } else if (key == "replay-timeout-ms") {
      int ms = 0;
      if (!parse_int(value, ms) || ms <= 0) return bad("a positive number of milliseconds");
      config.replay_timeout = std::chrono::milliseconds(ms);
    } else {
      return CodecError{key,
                        "unknown option (worker, block-size, replay, dp-rank, topic, eagle, clear-on-gap, "
                        "replay-timeout-ms, cache-namespace)"};
    }
    if (!has_value && key != "eagle" && key != "clear-on-gap")
      return CodecError{key, "needs a value (" + key + "=...)"};
  }
  if (!seen.contains("worker")) return CodecError{"worker", "required (worker=ID)"};
  if (!seen.contains("block-size")) return CodecError{"block-size", "required (block-size=N, the engine's)"};
  return config;
}

std::string describe_zmq_source(const ZmqBridgeConfig& config) {
  std::string out = config.endpoint;
  if (!config.replay_endpoint.empty()) out += " (replay " + config.replay_endpoint + ")";
  out += " as worker " + std::to_string(config.conversion.worker_id);
  out += " rank " + std::to_string(config.conversion.default_dp_rank);
  out += ", block size " + std::to_string(config.conversion.block_size);
  if (config.conversion.eagle) out += ", eagle";
  if (config.clear_on_gap) out += ", clear on gap";
  if (!config.topic.empty()) out += ", topic '" + config.topic + "'";
  return out;
}

}  // namespace kvidx::bridge
