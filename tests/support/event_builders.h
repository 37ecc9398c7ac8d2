// Test builders mirroring the reference's test_utils: the numbers given are local block hashes;
// each block's external hash is the sequence hash of the local hashes so far, so the same local
// hash at two depths gets two external hashes, as in a real engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx::testing {

using Hashes = std::vector<std::uint64_t>;

// Stored event of `locals` from the root, dp_rank 0, event_id 0.
RouterEvent make_store_event(WorkerId worker, const Hashes& locals);
RouterEvent make_store_event_with_dp_rank(WorkerId worker, const Hashes& locals, DpRank rank);
// Stored event of `locals` continuing the chain `prefix` (parent = external hash of prefix's tail).
RouterEvent make_store_event_with_parent(WorkerId worker, const Hashes& prefix, const Hashes& locals);
// Removed event for the blocks `locals` at the depths after `prefix`.
RouterEvent make_remove_event_with_parent(WorkerId worker, const Hashes& prefix, const Hashes& locals);
RouterEvent remove_event(WorkerId worker, std::uint64_t event_id, DpRank rank,
                         std::vector<ExternalSequenceBlockHash> hashes);
RouterEvent make_clear_event_with_dp_rank(WorkerId worker, DpRank rank);

// External hashes of `locals` chained after `prefix`.
std::vector<ExternalSequenceBlockHash> external_hashes(const Hashes& prefix, const Hashes& locals);
std::vector<LocalBlockHash> local_hashes(const Hashes& values);
// The external hashes a remove event made by make_remove_event_with_parent carries.
std::vector<ExternalSequenceBlockHash> remove_hashes_with_parent(const Hashes& prefix, const Hashes& locals);

// A chain of `blocks` blocks from the root held by (worker, rank), published as events of
// `per_event` blocks each (each event's parent = the previous event's last block), event ids 0, 1,
// ...; hashes are 19-20 digit numbers like real sequence hashes, and two streams' chains share
// no prefix. The tree keeps such a chain as
// one edge, so its dump has one Stored event of `blocks` blocks.
std::vector<RouterEvent> make_long_chain(WorkerId worker, DpRank rank, std::size_t blocks, std::size_t per_event);

// Snapshot normal form used by the reference's snapshot comparisons: event ids zeroed, events
// sorted by (worker, rank, first block hash).
std::vector<RouterEvent> snapshot_events(std::vector<RouterEvent> events);

}  // namespace kvidx::testing
