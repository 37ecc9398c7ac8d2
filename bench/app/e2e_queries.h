// Score queries over NATS for `kvidx-bench e2e`: what one kvidx replica answers on kv.query.scores
// (request/reply through a local nats-server), for sizing a deployment: queries/s and latency with
// 1 and several concurrent requesters, each on its own connection, as routers would be.
#pragma once

#include <cstddef>

#include "bench/common/report.h"
#include "tests/support/nats_server.h"

namespace kvidx::bench {

struct QueryFigures {
  double queries_per_second = 0;
  Percentiles latency;  // request sent -> reply decoded, per query
};

// A KvidxService (core mode, `lanes` lanes) holding `streams` streams x `chains` chains of 4 blocks,
// then `requesters` threads asking scores of a random chain (one held by 2 streams) back to back
// for `seconds`.
QueryFigures measure_score_queries(const testing::NatsServer& server, std::size_t lanes, std::size_t requesters,
                                   double seconds);

}  // namespace kvidx::bench
