// The indexes under test behind one interface, each with its own writer lanes: kvidx is the real
// LaneIndexer (sticky lanes over the ConcurrentRadixTree, reads inline on the caller); the two
// baselines get the same shape of harness (sticky round-robin lanes, mutex+condvar FIFO per lane,
// reads inline), so a figure compares the index structures, not the plumbing.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx::bench {

enum class EngineKind { kvidx, mutex_radix, flat_hash, positional };
inline constexpr EngineKind kAllEngines[] = {EngineKind::kvidx, EngineKind::mutex_radix, EngineKind::flat_hash,
                                             EngineKind::positional};
std::string engine_name(EngineKind kind);

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues one event on its stream's lane. One producer thread at a time.
  virtual void enqueue(RouterEvent event) = 0;
  // Returns when every queued event has been applied.
  virtual void flush() = 0;
  // Overlap scores on the caller's thread, concurrently with the lanes; returns the streams scored.
  virtual std::size_t find(std::span<const LocalBlockHash> query) const = 0;
  // Barrier, then the index as Stored events.
  virtual std::vector<RouterEvent> dump() = 0;
  // Events the index rejected (unknown parent / block); a correctness check for the harness.
  virtual std::size_t rejected() const = 0;
  // The index's own size figures for logs (kvidx: tree nodes, attached blocks); empty if none.
  virtual std::string shape() const { return {}; }
  // Barrier, then where the index's bytes go, by part, counted from its structures (kvidx:
  // LaneIndexer::memory); empty for an index without such accounting.
  virtual std::vector<std::pair<std::string, std::size_t>> memory_parts() { return {}; }
};

std::unique_ptr<Engine> make_engine(EngineKind kind, std::size_t lanes);

}  // namespace kvidx::bench
