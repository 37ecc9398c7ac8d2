// The query side of edge fingerprints over long runs (edge_fingerprint.h), vectorised.
//
// A 128-block query sums 128 terms of two 64-bit multiplies each: 0.1–0.19 µs per query on one
// core as a scalar loop inside find_matches, a fifth of the query. The terms are independent and
// the sum wraps, so the loop vectorises with no change to its result. The build's baseline (x86-64,
// SSE2) has no 64-bit vector multiply, so the same loop is also compiled for AVX2 (the multiply
// from 32-bit halves) and AVX-512 (vpmullq on 256-bit vectors: no 512-bit frequency license on
// the Intel parts that have one), and the first call picks the widest this CPU runs. Measured on
// the AMD EPYC VM (Zen 4), 128 blocks: 96–101 ns baseline, 54–56 ns AVX2, 24–26 ns AVX-512.
//
// NOTE: dispatch by __builtin_cpu_supports, not target_clones: an ifunc resolver runs before
// ThreadSanitizer's runtime is up and crashed the sanitized test binaries at load.
// This file is compiled with -O3 in every build (libindexer/CMakeLists.txt): GCC 12 does not
// vectorise the loop at -O2.
#include "libindexer/tree/edge_fingerprint.h"

namespace kvidx {
namespace {

using RunSum = std::uint64_t (*)(std::span<const LocalBlockHash>, std::uint32_t);

std::uint64_t baseline_sum(std::span<const LocalBlockHash> locals, std::uint32_t start_depth) {
  return run_fingerprint(locals, start_depth);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("arch=x86-64-v3"))) std::uint64_t avx2_sum(std::span<const LocalBlockHash> locals,
                                                                 std::uint32_t start_depth) {
  return run_fingerprint(locals, start_depth);
}

__attribute__((target("arch=x86-64-v4,prefer-vector-width=256"))) std::uint64_t avx512_sum(
    std::span<const LocalBlockHash> locals, std::uint32_t start_depth) {
  return run_fingerprint(locals, start_depth);
}

RunSum widest_sum() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) return avx512_sum;
  if (__builtin_cpu_supports("avx2")) return avx2_sum;
  return baseline_sum;
}
#else
RunSum widest_sum() { return baseline_sum; }
#endif

}  // namespace

std::uint64_t long_query_fingerprint(std::span<const LocalBlockHash> locals, std::uint32_t start_depth) {
  static const RunSum sum = widest_sum();  // NOTE: chosen once (thread-safe static initialisation)
  return sum(locals, start_depth);
}

}  // namespace kvidx
