// Live request load per worker stream, fed by a router's request lifecycle messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "libindexer/load/block_tracker.h"
#include "libindexer/protocol.h"

namespace kvidx {

enum class LoadStatus : std::uint8_t {
  ok,
  unknown_request,         // no live request has this id (never admitted, finished, or its worker removed)
  duplicate_request,       // admit with an id that is already live
  duplicate_output_block,  // append_output with a hash already live as an output on that stream
  invalid_fraction,        // set_fraction outside [0, 1] or not finite
  ownership_overflow,      // 2^32-1 live requests already share this exact prompt on the stream
};

std::string_view to_string(LoadStatus status);

struct AdmitResult {
  LoadStatus status = LoadStatus::ok;
  // First prompt position whose block was not already held on the stream; absent if none.
  std::optional<std::size_t> first_new_position;
};

struct FinishResult {
  LoadStatus status = LoadStatus::ok;
  WorkerWithDpRank stream;  // the stream the request was admitted on (meaningful when ok)
  // Prompt blocks that became absent from the stream, if any (see BlockTracker::release).
  std::optional<ReleasedPromptPath> released;
};

using StreamLoads = std::unordered_map<WorkerWithDpRank, std::size_t, WorkerWithDpRankHasher>;

// ActiveLoad keeps, per (worker, dp rank) stream, a BlockTracker of the blocks its in-flight
// requests hold, and each live request's chain by request id. A router feeds it admit / output /
// fraction / finish messages so score replies can carry each stream's active blocks.
//
// Every method is thread-safe. Failures (unknown or duplicate ids, bad arguments) come back as a
// LoadStatus and leave the state unchanged; no input makes it throw or abort. A stream appears
// when its first request is admitted and disappears when its last live request finishes, so
// snapshot() lists only streams with live requests and every other stream has zero active blocks.
class ActiveLoad {
 public:
  AdmitResult admit(WorkerWithDpRank stream, std::string_view request_id,
                    std::span<const ExternalSequenceBlockHash> sequence_hashes);
  LoadStatus append_output(std::string_view request_id, ExternalSequenceBlockHash hash);
  // Weights the blocks only this request holds (its exclusive prompt suffix and outputs) by `fraction`.
  LoadStatus set_fraction(std::string_view request_id, double fraction);
  FinishResult finish(std::string_view request_id);

  std::size_t active_blocks(WorkerWithDpRank stream) const;
  StreamLoads snapshot() const;
  std::size_t live_requests() const;

  // Drops every stream of `worker` (all dp ranks) and their live requests; later messages for those
  // requests report unknown_request. Returns how many requests were dropped.
  std::size_t remove_worker(WorkerId worker);

 private:
  struct StreamState {
    BlockTracker tracker;
    std::size_t live_requests = 0;
  };
  struct LiveRequest {
    WorkerWithDpRank stream;
    RequestBlockChain chain;  // always belongs to streams_.at(stream).tracker
  };
  struct RequestIdHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view id) const noexcept { return std::hash<std::string_view>{}(id); }
  };

  // NOTE: one mutex guards both maps. Each call costs at most one prompt walk, and a chain is only
  // meaningful together with its stream's tracker, so finer locking would need a lock order for little gain.
  mutable std::mutex mutex_;
  std::unordered_map<WorkerWithDpRank, StreamState, WorkerWithDpRankHasher> streams_;
  std::unordered_map<std::string, LiveRequest, RequestIdHash, std::equal_to<>> requests_;
};

}  // namespace kvidx
