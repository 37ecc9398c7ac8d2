#include "libindexer/lanes/routing_decision_pruner.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace kvidx {

bool RoutingDecisionPruner::ExpiryOrder::operator()(const ExpiryKey& a, const ExpiryKey& b) const {
  // Deeper blocks sort first among equal expiries (note the swapped depth operands).
  return std::tie(a.expires, b.depth, a.stream, a.hash) < std::tie(b.expires, a.depth, b.stream, b.hash);
}

namespace {

PruneConfig checked(PruneConfig config) {
  if (auto error = config.validate()) throw std::invalid_argument("PruneConfig: " + *error);
  return config;
}

}  // namespace

RoutingDecisionPruner::RoutingDecisionPruner(PruneConfig config, Clock clock)
    : config_(checked(config)), clock_(std::move(clock)) {
  if (!clock_) throw std::invalid_argument("RoutingDecisionPruner: empty clock");
}

RecordedDecision RoutingDecisionPruner::record_decision(WorkerWithDpRank stream, std::span<const LocalBlockHash> locals,
                                                        std::span<const ExternalSequenceBlockHash> sequence) {
  std::lock_guard lock(mutex_);
  return record_locked(stream, locals, sequence);
}

RecordedDecision RoutingDecisionPruner::record_decision(WorkerWithDpRank stream, std::span<const LocalBlockHash> locals,
                                                        std::span<const ExternalSequenceBlockHash> sequence,
                                                        const EventSink& sink) {
  std::lock_guard lock(mutex_);
  RecordedDecision result = record_locked(stream, locals, sequence);
  // NOTE: the sink runs under the lock so that no collect_expired() can slip a Removed event for
  // these blocks onto the lane ahead of this Stored event.
  if (result.store) {
    sink(std::move(*result.store));
    result.store.reset();
  }
  return result;
}

RecordedDecision RoutingDecisionPruner::record_locked(WorkerWithDpRank stream, std::span<const LocalBlockHash> locals,
                                                      std::span<const ExternalSequenceBlockHash> sequence) {
  RecordedDecision result;
  if (locals.size() != sequence.size()) {
    result.status = DecisionStatus::length_mismatch;
    return result;
  }
  if (sequence.empty()) return result;

  const TimePoint expires = clock_() + config_.ttl;
  StreamBlocks& blocks = streams_[stream];

  auto renew = [&](ExternalSequenceBlockHash hash, TrackedBlock& block) {
    if (block.expires == expires) return;
    by_expiry_.erase(ExpiryKey{block.expires, block.depth, stream, hash});
    block.expires = expires;
    by_expiry_.insert(ExpiryKey{block.expires, block.depth, stream, hash});
  };

  // Invariant: a stream's tracked blocks are prefix-closed (a tracked block's parent is tracked),
  // because blocks are only added as whole chains from the root and forgotten with their
  // descendants. So the tracked part of a decision is a prefix of it, and renewing that prefix
  // with the same expiry keeps every child expiring no later than its parent.
  std::optional<ExternalSequenceBlockHash> parent;
  std::size_t first_new = 0;
  for (; first_new < sequence.size(); ++first_new) {
    auto it = blocks.find(sequence[first_new]);
    if (it == blocks.end()) break;
    // A tracked hash under another parent means the caller's hashes do not form one chain; stop
    // here rather than link a block under two parents.
    if (it->second.parent != parent) {
      result.over_capacity = total_blocks_ > config_.max_tree_size;
      return result;
    }
    renew(sequence[first_new], it->second);
    parent = sequence[first_new];
    ++result.renewed_blocks;
  }

  RouterEvent event = synthetic_event(stream);  // takes an id below, only if it is kept
  KvCacheStoreData& store = event.event.data.emplace<KvCacheStoreData>();
  store.parent_hash = parent;
  for (std::size_t i = first_new; i < sequence.size(); ++i) {
    const ExternalSequenceBlockHash hash = sequence[i];
    // Same guard for the new suffix: a hash already tracked elsewhere ends the chain.
    if (blocks.contains(hash)) break;
    const auto depth = static_cast<std::uint32_t>(i);
    blocks.emplace(hash, TrackedBlock{parent, depth, expires, {}});
    if (parent) blocks.at(*parent).children.push_back(hash);
    by_expiry_.insert(ExpiryKey{expires, depth, stream, hash});
    ++total_blocks_;
    store.blocks.push_back(StoredBlock{hash, locals[i]});
    parent = hash;
  }

  result.new_blocks = store.blocks.size();
  if (!store.blocks.empty()) {
    event.event.event_id = next_event_id_++;
    result.store = std::move(event);
  }
  if (blocks.empty()) streams_.erase(stream);
  result.over_capacity = total_blocks_ > config_.max_tree_size;
  return result;
}

std::vector<RouterEvent> RoutingDecisionPruner::collect_expired() {
  std::lock_guard lock(mutex_);
  std::size_t forgotten = 0;
  return collect_locked(forgotten);
}

std::size_t RoutingDecisionPruner::collect_expired(const EventSink& sink) {
  std::lock_guard lock(mutex_);
  std::size_t forgotten = 0;
  // NOTE: handed over under the lock, for the same reason as record_decision's sink.
  for (RouterEvent& event : collect_locked(forgotten)) sink(std::move(event));
  return forgotten;
}

std::vector<RouterEvent> RoutingDecisionPruner::collect_locked(std::size_t& forgotten) {
  const TimePoint now = clock_();
  std::map<WorkerWithDpRank, std::vector<ExternalSequenceBlockHash>> removed;

  auto forget_front = [&] {
    const ExpiryKey front = *by_expiry_.begin();  // copied: forget_subtree erases it
    forgotten += forget_subtree(front.stream, front.hash, &removed[front.stream]);
  };

  while (!by_expiry_.empty() && by_expiry_.begin()->expires <= now) forget_front();

  if (total_blocks_ > config_.max_tree_size) {
    const std::size_t target = config_.prune_target_size();
    while (total_blocks_ > target && !by_expiry_.empty()) forget_front();
  }

  std::vector<RouterEvent> events;
  events.reserve(removed.size());
  for (auto& [stream, hashes] : removed) {
    RouterEvent& event = events.emplace_back(synthetic_event(stream));
    event.event.event_id = next_event_id_++;
    event.event.data.emplace<KvCacheRemoveData>().block_hashes = std::move(hashes);
  }
  return events;
}

std::size_t RoutingDecisionPruner::forget_subtree(WorkerWithDpRank stream, ExternalSequenceBlockHash hash,
                                                  std::vector<ExternalSequenceBlockHash>* out) {
  auto stream_it = streams_.find(stream);
  if (stream_it == streams_.end()) return 0;
  StreamBlocks& blocks = stream_it->second;
  auto top = blocks.find(hash);
  if (top == blocks.end()) return 0;

  if (top->second.parent) {
    auto& siblings = blocks.at(*top->second.parent).children;
    siblings.erase(std::find(siblings.begin(), siblings.end(), hash));
  }

  // Level order puts every block after its parent, so its reverse names descendants before
  // ancestors: each Removed hash is still in the tree when the lane applies it.
  std::vector<ExternalSequenceBlockHash> level_order{hash};
  for (std::size_t i = 0; i < level_order.size(); ++i) {
    const auto& children = blocks.at(level_order[i]).children;
    level_order.insert(level_order.end(), children.begin(), children.end());
  }
  for (auto it = level_order.rbegin(); it != level_order.rend(); ++it) {
    auto block = blocks.find(*it);
    by_expiry_.erase(ExpiryKey{block->second.expires, block->second.depth, stream, *it});
    blocks.erase(block);
    if (out != nullptr) out->push_back(*it);
  }
  total_blocks_ -= level_order.size();
  if (blocks.empty()) streams_.erase(stream_it);
  return level_order.size();
}

std::size_t RoutingDecisionPruner::forget_stream_locked(WorkerWithDpRank stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return 0;
  for (const auto& [hash, block] : it->second) by_expiry_.erase(ExpiryKey{block.expires, block.depth, stream, hash});
  const std::size_t count = it->second.size();
  total_blocks_ -= count;
  streams_.erase(it);
  return count;
}

std::size_t RoutingDecisionPruner::remove_stream(WorkerWithDpRank stream) {
  std::lock_guard lock(mutex_);
  return forget_stream_locked(stream);
}

std::size_t RoutingDecisionPruner::remove_stream(WorkerWithDpRank stream, const EventSink& sink) {
  std::lock_guard lock(mutex_);
  const std::size_t count = forget_stream_locked(stream);
  // NOTE: under the lock, so the Cleared lands behind every event already produced for the stream.
  if (count > 0) sink(cleared_event(stream));
  return count;
}

std::size_t RoutingDecisionPruner::remove_worker(WorkerId worker) {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto& stream : streams_of(worker)) count += forget_stream_locked(stream);
  return count;
}

std::size_t RoutingDecisionPruner::remove_worker(WorkerId worker, const EventSink& sink) {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto& stream : streams_of(worker)) {
    count += forget_stream_locked(stream);
    sink(cleared_event(stream));
  }
  return count;
}

std::vector<WorkerWithDpRank> RoutingDecisionPruner::streams_of(WorkerId worker) const {
  std::vector<WorkerWithDpRank> ranks;
  for (const auto& [stream, blocks] : streams_) {
    if (stream.worker_id == worker) ranks.push_back(stream);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

RouterEvent RoutingDecisionPruner::synthetic_event(WorkerWithDpRank stream) {
  RouterEvent event;
  event.worker_id = stream.worker_id;
  event.event.dp_rank = stream.dp_rank;
  return event;
}

RouterEvent RoutingDecisionPruner::cleared_event(WorkerWithDpRank stream) {
  RouterEvent event = synthetic_event(stream);
  event.event.event_id = next_event_id_++;
  event.event.data.emplace<KvCacheClearData>();
  return event;
}

std::size_t RoutingDecisionPruner::forget_blocks(WorkerWithDpRank stream,
                                                 std::span<const ExternalSequenceBlockHash> hashes) {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto hash : hashes) count += forget_subtree(stream, hash, nullptr);
  return count;
}

std::optional<RoutingDecisionPruner::TimePoint> RoutingDecisionPruner::next_expiry() const {
  std::lock_guard lock(mutex_);
  if (by_expiry_.empty()) return std::nullopt;
  return by_expiry_.begin()->expires;
}

bool RoutingDecisionPruner::over_capacity() const {
  std::lock_guard lock(mutex_);
  return total_blocks_ > config_.max_tree_size;
}

std::size_t RoutingDecisionPruner::tracked_blocks() const {
  std::lock_guard lock(mutex_);
  return total_blocks_;
}

std::size_t RoutingDecisionPruner::tracked_blocks(WorkerWithDpRank stream) const {
  std::lock_guard lock(mutex_);
  auto it = streams_.find(stream);
  return it == streams_.end() ? 0 : it->second.size();
}

}  // namespace kvidx
