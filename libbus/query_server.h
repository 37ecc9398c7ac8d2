// The request/reply side of `kvidx serve` (queue group "kvidx" unless noted): score queries,
// admin requests (stats, workers, dump; remove_worker on every replica), routing decisions
// (approximate mode) and request lifecycles (every replica). Wire shapes: libcodec/. Every reply
// leaves through reply() (chunked or reply_too_large when over max_payload, failures counted).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "libbus/ingest.h"
#include "libbus/nats_message.h"
#include "libbus/nats_subscription.h"
#include "libbus/service_context.h"
#include "libcodec/query_codec.h"

namespace kvidx::bus {

class QueryServer {
 public:
  // `stats_reply` renders kv.admin.stats and kv.admin.replicas from the request's body (the
  // service's counters, readiness and, when asked, the index digest: service.cpp).
  using StatsReply = std::function<std::string(std::string_view request)>;
  QueryServer(ServiceContext& ctx, Ingest& ingest, StatsReply stats_reply);

  BusStatus start();  // subscribes on ctx.query_conn
  void stop();        // unsubscribes (waits for running handlers)
  std::uint64_t queries_rejected() const;
  // {"<reason>": count...} of rejected score queries, by CodecErrorKind.
  std::vector<std::pair<std::string, std::uint64_t>> queries_rejected_by_reason() const;

 private:
  void reply(const Message& request, std::string_view body);
  ScoreReply score(const ScoreRequest& request);
  void on_scores(Message msg);
  void on_admin(Message msg);
  void on_remove_worker(Message msg);
  void on_replicas(Message msg);
  void send_dump(const Message& request);
  void on_routing_decision(Message msg);
  void on_request_lifecycle(Message msg);

  ServiceContext& ctx_;
  ServiceCounters& counters_;
  Ingest& ingest_;
  StatsReply stats_reply_;
  std::vector<Subscription> subs_;
};

}  // namespace kvidx::bus
