#include "libindexer/load/active_load.h"

#include <cmath>
#include <iterator>
#include <stdexcept>
#include <utility>

namespace kvidx {

std::string_view to_string(LoadStatus status) {
  switch (status) {
    case LoadStatus::ok: return "ok";
    case LoadStatus::unknown_request: return "unknown_request";
    case LoadStatus::duplicate_request: return "duplicate_request";
    case LoadStatus::duplicate_output_block: return "duplicate_output_block";
    case LoadStatus::invalid_fraction: return "invalid_fraction";
    case LoadStatus::ownership_overflow: return "ownership_overflow";
  }
  return "unknown";
}

AdmitResult ActiveLoad::admit(WorkerWithDpRank stream, std::string_view request_id,
                              std::span<const ExternalSequenceBlockHash> sequence_hashes) {
  std::lock_guard lock(mutex_);
  if (requests_.contains(request_id)) return {LoadStatus::duplicate_request, std::nullopt};

  const auto [stream_it, created] = streams_.try_emplace(stream);
  PromptAcquisition acquired;
  try {
    acquired = stream_it->second.tracker.acquire_prompt(sequence_hashes);
  } catch (const std::overflow_error&) {
    // acquire_prompt throws before changing the tracker. Only a stream with live requests can
    // overflow, so `created` is false in practice; erasing a fresh one just keeps streams_ tidy.
    if (created) streams_.erase(stream_it);
    return {LoadStatus::ownership_overflow, std::nullopt};
  }
  ++stream_it->second.live_requests;
  requests_.emplace(std::string(request_id), LiveRequest{stream, std::move(acquired.chain)});
  return {LoadStatus::ok, acquired.first_new_position};
}

LoadStatus ActiveLoad::append_output(std::string_view request_id, ExternalSequenceBlockHash hash) {
  std::lock_guard lock(mutex_);
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return LoadStatus::unknown_request;
  BlockTracker& tracker = streams_.at(it->second.stream).tracker;
  return tracker.append_output(it->second.chain, hash) ? LoadStatus::ok : LoadStatus::duplicate_output_block;
}

LoadStatus ActiveLoad::set_fraction(std::string_view request_id, double fraction) {
  if (!std::isfinite(fraction) || fraction < 0.0 || fraction > 1.0) return LoadStatus::invalid_fraction;
  std::lock_guard lock(mutex_);
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return LoadStatus::unknown_request;
  streams_.at(it->second.stream).tracker.set_unique_suffix_fractional(it->second.chain, fraction);
  return LoadStatus::ok;
}

FinishResult ActiveLoad::finish(std::string_view request_id) {
  std::lock_guard lock(mutex_);
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return {LoadStatus::unknown_request, {}, std::nullopt};

  const WorkerWithDpRank stream = it->second.stream;
  RequestBlockChain chain = std::move(it->second.chain);
  requests_.erase(it);

  const auto stream_it = streams_.find(stream);
  StreamState& state = stream_it->second;
  FinishResult result{LoadStatus::ok, stream, state.tracker.release(std::move(chain))};
  // A stream lives exactly as long as it has live requests; its tracker is empty by then.
  if (--state.live_requests == 0) streams_.erase(stream_it);
  return result;
}

std::size_t ActiveLoad::active_blocks(WorkerWithDpRank stream) const {
  std::lock_guard lock(mutex_);
  const auto it = streams_.find(stream);
  return it == streams_.end() ? 0 : it->second.tracker.active_blocks();
}

StreamLoads ActiveLoad::snapshot() const {
  std::lock_guard lock(mutex_);
  StreamLoads loads;
  loads.reserve(streams_.size());
  for (const auto& [stream, state] : streams_) loads.emplace(stream, state.tracker.active_blocks());
  return loads;
}

std::size_t ActiveLoad::live_requests() const {
  std::lock_guard lock(mutex_);
  return requests_.size();
}

std::size_t ActiveLoad::remove_worker(WorkerId worker) {
  std::lock_guard lock(mutex_);
  // Chains are plain handles: dropping them together with their trackers releases nothing twice.
  const std::size_t dropped =
      std::erase_if(requests_, [worker](const auto& entry) { return entry.second.stream.worker_id == worker; });
  std::erase_if(streams_, [worker](const auto& entry) { return entry.first.worker_id == worker; });
  return dropped;
}

}  // namespace kvidx
