// Shards: `kvidx serve --shard I/N` indexes only the workers NATS routes to shard I of N.
//
// Routing is NATS's own: the server's subject mapping (account `mappings`, nats-server >= 2.8)
//   "<prefix>.events.*": "<prefix>.events.{{partition(N,1)}}.{{wildcard(1)}}"
// rewrites every `<prefix>.events.<worker_id>` publish to `<prefix>.events.<P>.<worker_id>`, P the
// partition of the worker id token (FNV-1a 32-bit of its bytes, mod N), before JetStream stores
// it. Shard I's durable consumer filters `<prefix>.events.I.*`, so the server delivers it only its
// own workers' messages. Every rank of a worker goes to the same shard (the subject names only the
// worker). shard_of_worker() is the same function, for what kvidx routes itself (request
// lifecycles, routing decisions, in-process ZMQ sources) and to check what the server routed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "libbus/bus_error.h"
#include "libindexer/protocol.h"

namespace kvidx::bus {

struct ShardSpec {
  std::uint32_t index = 0;  // I: 0 .. count - 1
  std::uint32_t count = 1;  // N >= 1
  friend bool operator==(const ShardSpec&, const ShardSpec&) = default;
};

// At most this many shards (a sanity bound on --shard and --front).
inline constexpr std::uint32_t kMaxShards = 1024;

// "I/N" with 0 <= I < N <= kMaxShards; else an error naming what is wrong, e.g.
// `--shard 3/3: the shard index must be below the shard count (0 .. 2)`.
BusResult<ShardSpec> parse_shard_spec(std::string_view text);
std::string to_string(const ShardSpec& shard);  // "I/N"

// NATS's partition of a subject token: FNV-1a 32-bit over its bytes, mod `count`
// (nats-server's `{{partition(count, ...)}}`).
std::uint32_t partition_of_token(std::string_view token, std::uint32_t count);
// The shard of a worker publishing on `<prefix>.events.<worker_id>` (the id in decimal).
std::uint32_t shard_of_worker(WorkerId worker, std::uint32_t count);

// The server configuration line that routes events to `count` shards (README "Shards").
std::string shard_mapping_config(std::string_view prefix, std::uint32_t count);

}  // namespace kvidx::bus
