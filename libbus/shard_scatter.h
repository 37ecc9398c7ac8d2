// ShardScatter: one score query to every shard of a sharded deployment, the replies merged
// (libcodec/score_merge.h) into what one unsharded index answers. Used by the merging front
// (`kvidx serve --front N`, shard_front.h) and by clients that merge themselves (`kvidx score
// --shards N`).
//
// One inbox subscription (<inbox>.>) per ShardScatter; query k to shard I is published on
// <prefix>.shard.I.query.scores (queue group "kvidx": one replica of each shard answers) with reply
// subject <inbox>.k.I, so any number of queries are in flight at once and a reply names its query
// and shard. A shard that has not answered within timeout / (retries + 1) is asked again (its
// replica may have died holding the request; score queries are read-only, so a retry is safe); one
// that never answers fails the whole query: never a partial answer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "libbus/metrics.h"
#include "libbus/nats_connection.h"
#include "libbus/nats_subscription.h"
#include "libbus/subjects.h"
#include "libcodec/query_codec.h"
#include "libindexer/result.h"

namespace kvidx::bus {

struct ScatterOptions {
  std::uint32_t shards = 1;
  std::chrono::milliseconds timeout{2000};  // for the whole query, retries included
  int retries = 2;                          // per shard
  Counter* retries_counter = nullptr;       // optional: counts the shard requests sent again
};

// The merged reply (encoded, as one unsharded kvidx would send it) or why there is none: a
// shard's own error reply (e.g. bad_request, every shard rejects a bad query alike), or
// "unavailable" when a shard did not answer.
using ScatterOutcome = Result<std::string, ErrorReply>;

class ShardScatter {
 public:
  using Done = std::function<void(ScatterOutcome)>;

  // Subscribes its inbox on `conn` (which must outlive it) and starts its timer thread.
  static BusResult<std::unique_ptr<ShardScatter>> start(Connection& conn, Subjects subjects, ScatterOptions options);
  ~ShardScatter();
  ShardScatter(const ShardScatter&) = delete;
  ShardScatter& operator=(const ShardScatter&) = delete;

  // Sends `request` (a score request body) to every shard; `done` runs once, on a nats.c or the
  // timer thread, with the merged reply or the error.
  void query(const std::string& request, Done done);
  // The same, waiting for the outcome.
  ScatterOutcome query_sync(const std::string& request);

  // Shard requests sent again after no answer in time, since start.
  std::uint64_t retries_sent() const;

 private:
  struct Pending {
    std::string request;
    std::vector<std::optional<std::string>> replies;  // by shard
    std::vector<int> attempts;                        // by shard
    std::chrono::steady_clock::time_point attempt_deadline;
    std::size_t answered = 0;
    Done done;
  };

  ShardScatter(Connection& conn, Subjects subjects, ScatterOptions options);
  void on_reply(const Message& msg);
  void timer_loop();
  bool send(std::uint64_t id, std::uint32_t shard, const std::string& request);
  static ScatterOutcome merge(const Pending& pending);

  Connection& conn_;
  Subjects subjects_;
  ScatterOptions options_;
  std::chrono::milliseconds attempt_timeout_;
  std::string inbox_;
  Subscription sub_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t next_id_ = 1;
  std::uint64_t retries_sent_ = 0;
  std::map<std::uint64_t, Pending> pending_;
  std::thread timer_;
};

}  // namespace kvidx::bus
