// Edge fingerprints: a query matches a whole edge without reading the edge's blocks.
//
// A node keeps the wrapping sum of term(local, depth) over its edge's blocks. A query that reaches
// past an edge's end sums the same terms over its own blocks at those depths (the query is hot in
// cache, the edge usually is not) and compares one word instead of the edge's run of blocks. Only
// an edge the query does not match whole (a mismatch, or the query ends inside it) is read block by
// block, to find how far the match goes.
//
// term() is a bijection of the local hash for a given depth (xor, odd multiply and xor-shift each
// are), so two runs that differ in one block always differ in fingerprint. Runs that differ in two
// or more blocks collide with probability about 2^-64, the same odds as two different token
// blocks sharing a 64-bit local hash, which the whole index already takes as identity.
//
// Because the depth is absolute (from the root) and the sum wraps, fingerprints are additive: a
// split leaves the prefix `whole - suffix`, a merge gives the parent `parent + child`, in-place
// growth adds the new blocks' terms. Nothing is rehashed when the tree changes shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "libindexer/protocol.h"
#include "libindexer/tree/edge_names.h"

namespace kvidx {

inline constexpr std::uint64_t kFingerprintDepthStep = 0x9E3779B97F4A7C15ULL;

// The term of a local hash given its depth's key, (depth + 1) * kFingerprintDepthStep.
inline std::uint64_t fingerprint_mix(LocalBlockHash local, std::uint64_t depth_key) {
  std::uint64_t x = (local.value ^ depth_key) * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  return x * 0x94D049BB133111EBULL;
}

inline std::uint64_t fingerprint_term(LocalBlockHash local, std::uint32_t depth) {
  return fingerprint_mix(local, (depth + 1ULL) * kFingerprintDepthStep);
}

inline LocalBlockHash local_of(LocalBlockHash local) { return local; }
inline LocalBlockHash local_of(const EdgeBlock& block) { return block.local; }

// Fingerprint of run[i]'s local hash at depth start_depth + i. NOTE: one sum for queries and edges
// alike: find_matches trusts their equality, so they must never compute differently.
// The depth key steps by addition: a multiply per block fewer than fingerprint_term in the loop
// (the multiplies bound a long query's match), with the same sum (the tests check it).
template <typename Block>
std::uint64_t run_fingerprint(std::span<const Block> run, std::uint32_t start_depth) {
  std::uint64_t sum = 0;
  std::uint64_t depth_key = (start_depth + 1ULL) * kFingerprintDepthStep;
  for (const Block& block : run) {
    sum += fingerprint_mix(local_of(block), depth_key);
    depth_key += kFingerprintDepthStep;
  }
  return sum;
}

// The same sum over a run of at least kLongQueryRun query blocks, out of line (edge_fingerprint.cpp):
// run_fingerprint itself, compiled for the widest vector unit the CPU has (chosen on the first
// call). Wrapping addition and multiplication are exact in any order and lane, so it
// sums what the edges' scalar loop sums (a test checks every length up to 300).
std::uint64_t long_query_fingerprint(std::span<const LocalBlockHash> locals, std::uint32_t start_depth);
inline constexpr std::size_t kLongQueryRun = 16;

inline std::uint64_t query_fingerprint(std::span<const LocalBlockHash> locals, std::uint32_t start_depth) {
  // NOTE: a short run stays inline: the call costs more than the few blocks' terms.
  if (locals.size() >= kLongQueryRun) return long_query_fingerprint(locals, start_depth);
  return run_fingerprint(locals, start_depth);
}
inline std::uint64_t edge_fingerprint(std::span<const EdgeBlock> edge, std::uint32_t start_depth) {
  return run_fingerprint(edge, start_depth);
}

}  // namespace kvidx
