// Deterministic per-stream event histories for the service and fault tests, and the normal form
// their results are compared in. Pure data: no NATS, no processes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx::testing {

using Histories = std::map<WorkerWithDpRank, std::vector<RouterEvent>>;

// ids 0..n-1 for (w, r): a Stored of the shared prefix [1, 2, 3, 4], then Stored tails of 4 blocks
// below it (first block on one of 16 branches shared across workers) and, one time in
// `remove_one_in`, a Removed of an earlier tail. Same (w, r, n, seed, remove_one_in) → same events.
std::vector<RouterEvent> branching_history(WorkerId w, DpRank r, int n, std::uint64_t seed = 0,
                                           unsigned remove_one_in = 3);
// branching_history for workers 1..`workers` x ranks 0..`ranks`-1.
Histories branching_histories(WorkerId workers, DpRank ranks, int n, std::uint64_t seed = 0,
                              unsigned remove_one_in = 3);

// Every event of every stream, streams interleaved round-robin (each stream's order kept).
std::vector<const RouterEvent*> interleave(const Histories& histories);

// Structure-independent normal form of a dump (Stored events only): every
// (worker, rank, parent, block, tokens) held, whatever node boundaries the tree chose.
using BlockKey = std::tuple<WorkerId, DpRank, std::uint64_t, std::uint64_t, std::uint64_t>;
std::set<BlockKey> normal_form(const std::vector<RouterEvent>& dump);

}  // namespace kvidx::testing
