// Baseline 3 for the benchmarks: a positional index in the manner of the reference's newest
// published design (Dynamo's "Flash Indexer" PositionalIndexer, built here from its public
// description, not its code): one sharded hash map keyed by (position, local hash) whose entry
// names, for each sequence hash seen there, the streams holding that block; a per-stream reverse
// lookup (external hash -> position, local hash, sequence hash) that only the stream's own lane
// touches; and find_matches by jump search: it checks the query's holders every `jump` positions
// and binary-searches back only inside a window where some stream dropped out.
// Its sequence hashes are its own chain over local hashes (engines may name blocks their own way;
// an event's parent is resolved through the stream's reverse lookup), so it serves both bench fleets.
// Like the reference, it assumes a stream's holdings are prefix-closed (it holds every block before
// one it holds), which the bench workloads keep. Benchmark-only code: not part of libindexer.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "libindexer/protocol.h"

namespace kvidx::bench {

class PositionalIndex {
 public:
  static constexpr std::size_t kDefaultJump = 64;  // the reference's default jump size

  explicit PositionalIndex(std::size_t jump = kDefaultJump);
  ~PositionalIndex();
  PositionalIndex(const PositionalIndex&) = delete;
  PositionalIndex& operator=(const PositionalIndex&) = delete;

  // Returns false when the event could not be applied (unknown parent or removed block). Events of
  // one stream must come from one thread at a time (the harness's sticky lanes).
  bool apply_event(const RouterEvent& event);
  OverlapScores find_matches(std::span<const LocalBlockHash> query, bool early_exit = false) const;
  // One single-block Stored event per (block, holder), position by position (parents first).
  std::vector<RouterEvent> dump_events() const;
  std::size_t block_count() const;

 private:
  struct Key {
    std::uint64_t position;
    std::uint64_t local;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHasher {
    std::size_t operator()(const Key& k) const noexcept {
      return static_cast<std::size_t>((k.local ^ (k.position * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL);
    }
  };
  // The streams holding one (position, local, sequence) block; almost always one sequence per key.
  struct Holders {
    std::uint64_t sequence;
    std::vector<WorkerWithDpRank> streams;
  };
  // NOTE: the first sequence lives in place (no allocation for the common case), others in `more`;
  // `first.streams` is empty only when the whole entry is.
  struct Entry {
    Holders first{0, {}};
    std::vector<Holders> more;
    Holders* find(std::uint64_t sequence);
    const Holders* find(std::uint64_t sequence) const;
    Holders& add(std::uint64_t sequence);
    void drop_empty(Holders* holders);  // erases `holders` when it has no stream left
    bool empty() const { return first.streams.empty(); }
    std::size_t sequences() const { return empty() ? 0 : 1 + more.size(); }
  };
  struct Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<Key, Entry, KeyHasher> map;  // guarded by mutex
  };
  static constexpr std::size_t kShards = 64;

  // A stream's own blocks, by the engine's external hash; only its lane writes it.
  struct Held {
    std::uint64_t position;
    std::uint64_t local;
    std::uint64_t sequence;
  };
  struct StreamBlocks {
    std::unordered_map<std::uint64_t, Held> by_external;
    std::atomic<std::size_t> count{0};  // by_external.size(), readable by queries
  };

  Shard& shard_of(const Key& key) const;
  StreamBlocks& stream_blocks(WorkerWithDpRank stream);
  const StreamBlocks* find_stream_blocks(WorkerWithDpRank stream) const;
  void add_holder(const Held& held, WorkerWithDpRank stream);
  void drop_holder(const Held& held, WorkerWithDpRank stream);
  // Number of streams holding (position, local, sequence); copies them into `out` when asked.
  std::size_t holders_at(std::size_t position, std::uint64_t local, std::uint64_t sequence,
                         std::vector<WorkerWithDpRank>* out) const;

  std::size_t jump_;
  mutable std::array<Shard, kShards> shards_;
  mutable std::mutex streams_mutex_;
  std::unordered_map<WorkerWithDpRank, std::unique_ptr<StreamBlocks>, WorkerWithDpRankHasher> streams_;  // guarded
};

}  // namespace kvidx::bench
