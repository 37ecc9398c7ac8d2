// Every NATS subject kvidx uses, derived from one configurable prefix (default "kv"):
//   <p>.events.<worker_id>   workers -> kvidx (RouterEvent or array); wildcard <p>.events.>
//   <p>.query.scores         request/reply, queue group "kvidx"
//   <p>.admin.{stats,workers,remove_worker,dump}
//   <p>.routing.decisions    router -> kvidx (approximate mode)
//   <p>.requests.<worker_id> router -> kvidx (request lifecycle for active load)
//   <p>.deadletter           kvidx -> (rejected messages, reason in the Kvidx-Reason header)
//   <p>.snapshots.<name>.{data,commit}  kvidx's own snapshot stream
// A shard (`--shard I/N`, shard_spec.h) reads <p>.events.I.* (the server maps <p>.events.<w> there),
// answers <p>.shard.I.query.scores and <p>.shard.I.admin.{stats,workers,dump} (the merging front
// answers <p>.query.scores), and keeps its snapshots under <p>.snapshots.shard-I-of-N.<name>.*
// (so no other shard, and no unsharded instance, bootstraps from them). remove_worker, replicas,
// routing decisions and request lifecycles keep their subjects.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "libbus/shard_spec.h"
#include "libindexer/protocol.h"

namespace kvidx::bus {

inline constexpr const char* kQueueGroup = "kvidx";
inline constexpr const char* kDeadLetterReasonHeader = "Kvidx-Reason";
inline constexpr const char* kDeadLetterSubjectHeader = "Kvidx-Subject";
// Only on a dead letter whose body was cut to fit the server's max_payload: the original size in bytes.
inline constexpr const char* kDeadLetterTruncatedHeader = "Kvidx-Truncated";

class Subjects {
 public:
  explicit Subjects(std::string prefix = "kv");
  // The subjects of shard `shard` (see above); the unsharded ones for nullopt.
  Subjects(std::string prefix, std::optional<ShardSpec> shard);

  const std::optional<ShardSpec>& shard() const { return shard_; }

  const std::string& prefix() const { return prefix_; }
  std::string events(WorkerId worker) const;
  std::string events_wildcard() const;
  std::string query_scores() const;
  std::string admin_stats() const;
  std::string admin_workers() const;
  std::string admin_remove_worker() const;
  std::string admin_dump() const;
  // Every replica answers (a plain subscription, not the queue group): `kvidx stats --all`.
  std::string admin_replicas() const;
  std::string admin_wildcard() const;
  std::string routing_decisions() const;
  std::string requests(WorkerId worker) const;
  std::string requests_wildcard() const;
  std::string deadletter() const;
  std::string snapshot_data(std::string_view name) const;
  std::string snapshot_commit(std::string_view name) const;
  std::string snapshots_wildcard() const;

  // What a shard's durable consumer reads: <p>.events.<I>.* (nullopt-sharded: events_wildcard()).
  std::string events_filter() const;
  // <p>.shard.<index>.query.scores: what the merging front (and a client merging itself) asks.
  std::string shard_query_scores(std::uint32_t index) const;
  // The worker id of "<prefix>.events.<P>.<id>" (the subject a server's shard mapping makes of
  // "<prefix>.events.<id>", any partition P): what an unsharded kvidx reads on a sharded stream.
  std::optional<WorkerId> worker_from_partitioned_events_subject(std::string_view subject) const;
  // The worker id of "<prefix>.events.<I>.<id>" for this shard's I; nullopt for anything else.
  std::optional<WorkerId> worker_from_shard_events_subject(std::string_view subject) const;

  // The worker id of "<prefix>.events.<id>"; nullopt for any other subject (for example Dynamo's
  // namespace/component layout), in which case the worker id comes from the payload.
  std::optional<WorkerId> worker_from_events_subject(std::string_view subject) const;
  // Same for "<prefix>.requests.<id>".
  std::optional<WorkerId> worker_from_requests_subject(std::string_view subject) const;

 private:
  std::string prefix_;
  std::optional<ShardSpec> shard_;
  std::string query_base_;     // <p>, or <p>.shard.<I> for a shard
  std::string snapshot_base_;  // <p>.snapshots, or <p>.snapshots.shard-I-of-N
};

// True when `subject` is a syntactically valid NATS subject or wildcard (non-empty tokens, `>`
// only last, no whitespace).
bool is_valid_subject(std::string_view subject);

}  // namespace kvidx::bus
