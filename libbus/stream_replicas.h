// How many copies of kvidx's streams (events, snapshots) a JetStream cluster keeps, and what an
// operator is told about it at start.
//
// `--stream-replicas N` (ServiceConfig::stream_replicas) sets the count: a new stream is created
// with N, an existing one with another count is updated to N (JetStream moves the copies; the log
// says so). Unset (0, the default) it is automatic: a new stream gets 3 replicas when the
// connection knows 3 or more servers (the --nats URLs plus those the cluster advertises to clients
// in its INFO, see Connection::known_servers), else 1; an existing stream keeps its count, and a
// warning says when that differs from the automatic one (an R1 stream on a cluster does not
// survive the loss of its server). Never changed behind the operator's back.
#pragma once

#include <cstddef>
#include <string>

#include "libbus/nats_jetstream.h"

namespace kvidx::bus {

// The automatic count for a connection knowing `known_servers` servers: 3 from 3 servers, else 1.
int auto_stream_replicas(std::size_t known_servers);

// `spec` with its replica fields set from `configured` (0: automatic) and `known_servers`.
StreamSpec with_replicas(StreamSpec spec, int configured, std::size_t known_servers);

// One log line about the replica count ensure_stream left `spec.name` with (created, changed, or
// kept while differing from the automatic count); nothing when an existing stream already had it.
// Returns the line (empty when nothing was logged), for tests.
std::string log_stream_replicas(const StreamSpec& spec, const StreamState& state, std::size_t known_servers);

}  // namespace kvidx::bus
