// An order-independent digest of an index, so replicas can prove they hold the same thing.
//
// Per (worker, rank, tier) stream: the sum (mod 2^64) over every block it holds of
// XXH3(path hash, external name), where a block's path hash chains XXH3 over the local hashes from
// the root down to it. So the digest depends only on the set of (stream, block path, name) held —
// not on the order events were applied in, how the compressed tree split its edges, or how a dump
// groups blocks into events — and two indexes holding the same blocks under the same names have
// equal digests. `total` combines every stream's (key, blocks, digest), again by a sum.
// Computed from a dump (ConcurrentRadixTree::dump_events: Stored events, parents before children);
// cost ~ one hash per held block. The tier key is the event's storage tier (absent: device).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx {

struct StreamDigest {
  WorkerWithDpRank stream;
  StorageTier tier = StorageTier::device;
  std::uint64_t blocks = 0;
  std::uint64_t digest = 0;
};

struct IndexDigest {
  std::uint64_t total = 0;
  std::uint64_t blocks = 0;
  std::vector<StreamDigest> streams;  // sorted by (worker, rank, tier)
};

// The digest of a dump's Stored events (other kinds are ignored). A Stored whose parent the
// stream does not hold in the dump (not the case in a dump) chains from the root.
IndexDigest digest_of(std::span<const RouterEvent> dump);

// 16 lowercase hex digits.
std::string digest_hex(std::uint64_t digest);

}  // namespace kvidx
