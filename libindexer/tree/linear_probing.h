// Backward-shift deletion for the tree's linear-probing tables (WorkerLookup's buckets,
// ChildTable's index): both are power-of-two arrays probed forward from a key's home slot.
#pragma once

#include <cstddef>

namespace kvidx {

// `hole` was just emptied: pulls the later entries of its probe run back into it, so lookups never
// need tombstones. is_free(i): slot i is empty; home_of(i): the home slot of the entry at i;
// move(from, to): moves the entry at `from` into the empty `to` and leaves `from` empty.
template <typename IsFree, typename HomeOf, typename Move>
void backward_shift_after_erase(std::size_t hole, std::size_t mask, IsFree&& is_free, HomeOf&& home_of, Move&& move) {
  for (std::size_t j = (hole + 1) & mask; !is_free(j); j = (j + 1) & mask) {
    const std::size_t want = home_of(j);
    // NOTE: j moves into the hole unless its home lies cyclically in (hole, j]: a lookup for it,
    // starting at its home, would then never pass the hole.
    const bool home_after_hole = hole <= j ? (want > hole && want <= j) : (want > hole || want <= j);
    if (!home_after_hole) {
      move(j, hole);
      hole = j;
    }
  }
}

}  // namespace kvidx
