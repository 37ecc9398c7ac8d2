// JSON of the two messages a router sends kvidx besides score queries, errors as values like the
// rest of the codec (one document, the query limits on bytes and nesting, bounded reasons).
//
// Routing decision (<prefix>.routing.decisions, approximate mode): the router's choice for one
// request, indexed as if the worker had reported the blocks:
//   {"worker_id":u64, "dp_rank"?:u32, "local_hashes":[u64...], "sequence_hashes"?:[u64...]}
// Request lifecycle (<prefix>.requests.<worker_id>, active load), one of:
//   {"op":"admit","request_id":"r","dp_rank"?:u32,"block_hashes":[u64...]}
//   {"op":"output","request_id":"r","block_hash":u64}
//   {"op":"fraction","request_id":"r","fraction":0.5}
//   {"op":"finish","request_id":"r"}
// Both are answered (when the sender asks for a reply) with {"ok":true} or an error reply
// (query_codec.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libcodec/codec_result.h"
#include "libcodec/query_codec.h"
#include "libindexer/protocol.h"

namespace kvidx {

struct RoutingDecision {
  WorkerWithDpRank stream;
  std::vector<LocalBlockHash> local_hashes;
  // Absent: the chain of local_hashes (hashing.h compute_sequence_hashes), filled in by the reader.
  std::optional<std::vector<ExternalSequenceBlockHash>> sequence_hashes;
  friend bool operator==(const RoutingDecision&, const RoutingDecision&) = default;
};

enum class LifecycleOp : std::uint8_t { admit, output, fraction, finish };

struct RequestLifecycle {
  LifecycleOp op = LifecycleOp::finish;
  std::string request_id;
  DpRank dp_rank = 0;                                   // admit
  std::vector<ExternalSequenceBlockHash> block_hashes;  // admit
  ExternalSequenceBlockHash block_hash{0};              // output
  double fraction = 0;                                  // fraction
  friend bool operator==(const RequestLifecycle&, const RequestLifecycle&) = default;
};

// `limits`: message bytes and nesting as for score queries; max_hashes bounds each hash array.
Decoded<RoutingDecision> decode_routing_decision(std::string_view json, const QueryLimits& limits = {});
std::string encode_routing_decision(const RoutingDecision& decision);

Decoded<RequestLifecycle> decode_request_lifecycle(std::string_view json, const QueryLimits& limits = {});
std::string encode_request_lifecycle(const RequestLifecycle& message);

}  // namespace kvidx
