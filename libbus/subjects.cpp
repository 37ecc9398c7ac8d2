#include "libbus/subjects.h"

#include <charconv>

namespace kvidx::bus {
namespace {

std::optional<WorkerId> trailing_id(std::string_view subject, std::string_view head) {
  if (subject.size() <= head.size() || subject.substr(0, head.size()) != head) return std::nullopt;
  const std::string_view digits = subject.substr(head.size());
  WorkerId id = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return id;
}

}  // namespace

Subjects::Subjects(std::string prefix) : Subjects(std::move(prefix), std::nullopt) {}

Subjects::Subjects(std::string prefix, std::optional<ShardSpec> shard)
    : prefix_(prefix.empty() ? "kv" : std::move(prefix)), shard_(shard) {
  query_base_ = shard_ ? prefix_ + ".shard." + std::to_string(shard_->index) : prefix_;
  snapshot_base_ =
      shard_ ? prefix_ + ".snapshots.shard-" + std::to_string(shard_->index) + "-of-" + std::to_string(shard_->count)
             : prefix_ + ".snapshots";
}

std::string Subjects::events(WorkerId worker) const { return prefix_ + ".events." + std::to_string(worker); }
std::string Subjects::events_wildcard() const { return prefix_ + ".events.>"; }
std::string Subjects::query_scores() const { return query_base_ + ".query.scores"; }
std::string Subjects::admin_stats() const { return query_base_ + ".admin.stats"; }
std::string Subjects::admin_workers() const { return query_base_ + ".admin.workers"; }
std::string Subjects::admin_remove_worker() const { return prefix_ + ".admin.remove_worker"; }
std::string Subjects::admin_dump() const { return query_base_ + ".admin.dump"; }
std::string Subjects::admin_replicas() const { return prefix_ + ".admin.replicas"; }
std::string Subjects::admin_wildcard() const { return query_base_ + ".admin.*"; }
std::string Subjects::routing_decisions() const { return prefix_ + ".routing.decisions"; }
std::string Subjects::requests(WorkerId worker) const { return prefix_ + ".requests." + std::to_string(worker); }
std::string Subjects::requests_wildcard() const { return prefix_ + ".requests.*"; }
std::string Subjects::deadletter() const { return prefix_ + ".deadletter"; }
std::string Subjects::snapshot_data(std::string_view name) const {
  return snapshot_base_ + "." + std::string(name) + ".data";
}
std::string Subjects::snapshot_commit(std::string_view name) const {
  return snapshot_base_ + "." + std::string(name) + ".commit";
}
std::string Subjects::snapshots_wildcard() const { return prefix_ + ".snapshots.>"; }

std::string Subjects::events_filter() const {
  return shard_ ? prefix_ + ".events." + std::to_string(shard_->index) + ".*" : events_wildcard();
}

std::string Subjects::shard_query_scores(std::uint32_t index) const {
  return prefix_ + ".shard." + std::to_string(index) + ".query.scores";
}

std::optional<WorkerId> Subjects::worker_from_partitioned_events_subject(std::string_view subject) const {
  const std::string head = prefix_ + ".events.";
  if (subject.size() <= head.size() || subject.substr(0, head.size()) != head) return std::nullopt;
  const std::string_view rest = subject.substr(head.size());
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  for (const char c : rest.substr(0, dot)) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return trailing_id(rest, rest.substr(0, dot + 1));
}

std::optional<WorkerId> Subjects::worker_from_shard_events_subject(std::string_view subject) const {
  if (!shard_) return std::nullopt;
  return trailing_id(subject, prefix_ + ".events." + std::to_string(shard_->index) + ".");
}

std::optional<WorkerId> Subjects::worker_from_events_subject(std::string_view subject) const {
  return trailing_id(subject, prefix_ + ".events.");
}

std::optional<WorkerId> Subjects::worker_from_requests_subject(std::string_view subject) const {
  return trailing_id(subject, prefix_ + ".requests.");
}

bool is_valid_subject(std::string_view subject) {
  if (subject.empty()) return false;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = subject.find('.', start);
    const std::string_view token = subject.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (token.empty()) return false;
    for (char c : token) {
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') return false;
    }
    if (token.find('>') != std::string_view::npos && (token != ">" || dot != std::string_view::npos)) return false;
    if (token.find('*') != std::string_view::npos && token != "*") return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

}  // namespace kvidx::bus
