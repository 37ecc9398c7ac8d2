#include "libbus/shard_spec.h"

#include <fmt/format.h>

#include "libbus/nats_error.h"

#include <charconv>

namespace kvidx::bus {
namespace {

BusError bad_shard(std::string_view text, std::string_view why) {
  return BusError{NATS_INVALID_ARG, fmt::format("--shard {}: {}", text, why)};
}

std::optional<std::uint32_t> read_number(std::string_view digits) {
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  std::uint32_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

}  // namespace

BusResult<ShardSpec> parse_shard_spec(std::string_view text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return bad_shard(text, "expected I/N (this instance's shard index I of N shards, 0 <= I < N), e.g. 0/3");
  }
  const auto index = read_number(text.substr(0, slash));
  const auto count = read_number(text.substr(slash + 1));
  if (!index || !count) return bad_shard(text, "I and N must be non-negative integers, e.g. 0/3");
  if (*count == 0) return bad_shard(text, "the shard count N must be at least 1");
  if (*count > kMaxShards) return bad_shard(text, fmt::format("at most {} shards", kMaxShards));
  if (*index >= *count) {
    return bad_shard(text, fmt::format("the shard index must be below the shard count (0 .. {})", *count - 1));
  }
  return ShardSpec{*index, *count};
}

std::string to_string(const ShardSpec& shard) { return fmt::format("{}/{}", shard.index, shard.count); }

std::uint32_t partition_of_token(std::string_view token, std::uint32_t count) {
  std::uint32_t hash = 0x811c9dc5u;  // FNV-1a 32-bit offset basis
  for (const char c : token) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x01000193u;  // FNV prime
  }
  return count == 0 ? 0 : hash % count;
}

std::uint32_t shard_of_worker(WorkerId worker, std::uint32_t count) {
  return partition_of_token(std::to_string(worker), count);
}

std::string shard_mapping_config(std::string_view prefix, std::uint32_t count) {
  return fmt::format(R"(mappings = {{ "{0}.events.*": "{0}.events.{{{{partition({1},1)}}}}.{{{{wildcard(1)}}}}" }})",
                     prefix, count);
}

}  // namespace kvidx::bus
