// Request/reply that rides out a replica going away: a read-only request (score query, stats) that
// got no answer — nobody subscribed (NATS_NO_RESPONDERS, e.g. the only replica restarting) or no
// reply in time (the replica that took it was killed mid-request) — is sent again, up to
// `retries` more times, within one overall deadline. Only for idempotent requests: a slow replica
// may answer the first copy after the retry went out (the later reply is then ignored).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"

namespace kvidx::bus {

struct RetryPolicy {
  int retries = 2;                            // extra attempts after the first
  std::int64_t timeout_ms = 5000;             // overall; each attempt waits timeout_ms / (retries + 1)
  std::int64_t no_responders_pause_ms = 100;  // before retrying a request nobody was subscribed to
};

struct RetriedReply {
  std::string body;
  int attempts = 0;  // 1 when the first attempt was answered
};

// request_accepting_chunks (chunked_reply.h) with retries; the last attempt's error when none was
// answered. An incomplete chunked reply (NATS_MISMATCH) is not retried.
BusResult<RetriedReply> request_retrying(Connection& conn, std::string_view subject, std::string_view body,
                                         const RetryPolicy& policy);

}  // namespace kvidx::bus
