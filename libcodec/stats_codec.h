// JSON of kvidx's statistics: the kv.admin.stats reply (the service's counters and readiness) and
// the object `kvidx stats` prints (live: that reply plus the dump's edge lengths; offline: counts
// of an index built from an event log). nlohmann/json stays inside the .cpp.
//
// Stats reply (kv.admin.stats), one object, keys in alphabetical order:
//   {"ready":bool, "not_ready_reason":"...", "snapshot_stale":bool,
//    "snapshot_age_seconds":number|null (null: snapshots off), "mode":"core"|"jetstream",
//    "queries_rejected_by_reason":{"<reason>":N...}, "replica":"<durable>", "restored_from":"<replica>"
//    (empty: its own snapshot or none), one unsigned count per kStatsCounters row, and when the
//    request asked for it "digest":{"position":S,"total":"<hex>","blocks":N,"streams":N
//    [,"by_stream":[{"worker_id","dp_rank","tier","blocks","digest"}...]]} or {"error":"..."}}
// Both carry "tiers":{"<tier>":{"streams","blocks","nodes","events_applied"}...} for every storage tier
// (device included; the top-level streams, blocks and nodes are the device tree's), and the reply
// "tier_weights":{"<tier>":weight...}.
// Stats request (kv.admin.stats, kv.admin.replicas): {} or {"digest": true|"streams"|"total"}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libcodec/codec_result.h"

namespace kvidx {

// The index digest (libindexer/index_digest.h) as the stats carry it.
struct StreamDigestLine {
  std::uint64_t worker_id = 0;
  std::uint64_t dp_rank = 0;
  std::string tier;
  std::uint64_t blocks = 0;
  std::string digest;  // hex
  friend bool operator==(const StreamDigestLine&, const StreamDigestLine&) = default;
};
struct StatsDigest {
  std::string error;                      // non-empty: no digest could be taken (the rest is unset)
  std::optional<std::uint64_t> position;  // the events stream sequence it is a cut at (live only)
  std::string total;                      // hex
  std::uint64_t blocks = 0;
  std::uint64_t streams = 0;
  std::optional<std::vector<StreamDigestLine>> by_stream;  // when asked for
  friend bool operator==(const StatsDigest&, const StatsDigest&) = default;
};

// One storage tier's size (libindexer/lanes ShardSizes, per tier).
struct TierStats {
  std::uint64_t streams = 0;
  std::uint64_t blocks = 0;
  std::uint64_t nodes = 0;
  std::uint64_t events_applied = 0;
  friend bool operator==(const TierStats&, const TierStats&) = default;
};

// How much of the digest a stats request asks for (it costs a dump of the index).
enum class DigestDetail : std::uint8_t { none, total, streams };
// {"digest": true | "streams"}: streams; {"digest": "total"}: total; anything else (e.g. {}): none.
DigestDetail decode_stats_request(std::string_view json);

struct StatsReply {
  bool ready = false;
  std::string not_ready_reason;  // one line, empty when ready
  bool snapshot_stale = false;
  std::optional<double> snapshot_age_seconds;  // nullopt: snapshots are off
  std::string mode;                            // "core" or "jetstream"
  std::map<std::string, std::uint64_t> queries_rejected_by_reason;
  std::string replica;        // the replica's durable consumer name
  std::string restored_from;  // the replica whose snapshot it bootstrapped from, if another's
  std::string shard;          // "I/N" of a shard (`kvidx serve --shard`); empty (and absent): unsharded
  std::optional<StatsDigest> digest;
  std::map<std::string, TierStats> tiers;      // by tier name, every tier
  std::map<std::string, double> tier_weights;  // by tier name

  std::uint64_t snapshot_failures = 0;
  std::uint64_t workers = 0;
  std::uint64_t streams = 0;
  std::uint64_t blocks = 0;
  std::uint64_t nodes = 0;
  std::uint64_t blocks_pending_cleanup = 0;
  std::uint64_t lanes = 0;
  std::uint64_t messages = 0;
  std::uint64_t events_applied = 0;
  std::uint64_t duplicates = 0;
  std::uint64_t gaps = 0;
  std::uint64_t missing_events = 0;
  std::uint64_t resets = 0;
  std::uint64_t dead_letters = 0;
  std::uint64_t dead_letters_truncated = 0;
  std::uint64_t dead_letter_failures = 0;
  std::uint64_t stream_limit_rejections = 0;
  std::uint64_t max_streams = 0;
  std::uint64_t queries_rejected = 0;
  std::uint64_t dispatched_sequence = 0;
  std::uint64_t acked_sequence = 0;
  std::uint64_t restored_sequence = 0;
  std::uint64_t history_trimmed = 0;
  std::uint64_t consumer_resets = 0;
  std::uint64_t stream_holes = 0;
  std::uint64_t snapshots_written = 0;
  std::uint64_t local_batches = 0;
  std::uint64_t apply_parent_not_found = 0;
  std::uint64_t apply_block_not_found = 0;
  std::uint64_t apply_invalid = 0;
  std::uint64_t active_requests = 0;
  std::uint64_t stream_replicas = 0;
  std::uint64_t known_servers = 0;

  friend bool operator==(const StatsReply&, const StatsReply&) = default;
};

// The unsigned counts of the reply, by JSON key: the encoder writes and the decoder requires each
// row, so a count added to StatsReply needs one row here and nothing else.
struct StatsCounter {
  const char* key;
  std::uint64_t StatsReply::*field;
};
inline constexpr StatsCounter kStatsCounters[] = {
    {"snapshot_failures", &StatsReply::snapshot_failures},
    {"workers", &StatsReply::workers},
    {"streams", &StatsReply::streams},
    {"blocks", &StatsReply::blocks},
    {"nodes", &StatsReply::nodes},
    {"blocks_pending_cleanup", &StatsReply::blocks_pending_cleanup},
    {"lanes", &StatsReply::lanes},
    {"messages", &StatsReply::messages},
    {"events_applied", &StatsReply::events_applied},
    {"duplicates", &StatsReply::duplicates},
    {"gaps", &StatsReply::gaps},
    {"missing_events", &StatsReply::missing_events},
    {"resets", &StatsReply::resets},
    {"dead_letters", &StatsReply::dead_letters},
    {"dead_letters_truncated", &StatsReply::dead_letters_truncated},
    {"dead_letter_failures", &StatsReply::dead_letter_failures},
    {"stream_limit_rejections", &StatsReply::stream_limit_rejections},
    {"max_streams", &StatsReply::max_streams},
    {"queries_rejected", &StatsReply::queries_rejected},
    {"dispatched_sequence", &StatsReply::dispatched_sequence},
    {"acked_sequence", &StatsReply::acked_sequence},
    {"restored_sequence", &StatsReply::restored_sequence},
    {"history_trimmed", &StatsReply::history_trimmed},
    {"consumer_resets", &StatsReply::consumer_resets},
    {"stream_holes", &StatsReply::stream_holes},
    {"snapshots_written", &StatsReply::snapshots_written},
    {"local_batches", &StatsReply::local_batches},
    {"apply_parent_not_found", &StatsReply::apply_parent_not_found},
    {"apply_block_not_found", &StatsReply::apply_block_not_found},
    {"apply_invalid", &StatsReply::apply_invalid},
    {"active_requests", &StatsReply::active_requests},
    {"stream_replicas", &StatsReply::stream_replicas},
    {"known_servers", &StatsReply::known_servers},
};

std::string encode_stats_reply(const StatsReply& reply);
// Every field above is required (a service and its CLI are one build); unknown keys are ignored.
Decoded<StatsReply> decode_stats_reply(std::string_view json);

// `kvidx stats --all`: every replica's identity, position and digest, sorted by replica:
// {"replicas":N,"same_position":bool,"agree":bool|null (null: positions differ),"by_replica":[{"replica",
// "ready","not_ready_reason","acked_sequence","restored_from","stream_replicas","streams","blocks","digest",
// "shard"? (shards only)}...]}; replicas of different shards hold different workers, so positions
// and digests are compared within each shard (sorted by shard, then replica).
std::string encode_replicas_summary(std::vector<StatsReply> replies);

// The tree's shape as `kvidx stats` prints it: blocks counted once however many streams hold
// them, and how many tree edges have each length (in blocks).
struct TreeShape {
  std::uint64_t distinct_blocks = 0;
  std::string edge_lengths_from;  // "tree" (offline) or "dump" (live: the service's layout is not exposed)
  std::map<std::size_t, std::size_t> edge_length_histogram;
};

// `kvidx stats --nats`: the stats reply's keys (alphabetical), then distinct_blocks,
// edge_lengths_from and edge_length_histogram ({"<length>":count...}).
std::string encode_live_stats(const StatsReply& reply, const TreeShape& shape);

// `kvidx stats --events`: an index built from an event log.
struct OfflineStats {
  std::uint64_t workers = 0;
  std::uint64_t streams = 0;
  std::uint64_t blocks = 0;
  std::uint64_t nodes = 0;
  TreeShape shape;
  std::vector<std::pair<std::string, std::uint64_t>> events_by_type;    // in this order
  std::vector<std::pair<std::string, std::uint64_t>> events_by_result;  // in this order
  // The intake's ordering counters, named as in the stats reply.
  std::uint64_t duplicates = 0;
  std::uint64_t gaps = 0;
  std::uint64_t missing_events = 0;
  std::uint64_t resets = 0;
  std::uint64_t bad_lines = 0;
  std::map<std::string, TierStats> tiers;  // by tier name, every tier (top-level counts: device)
  std::optional<StatsDigest> digest;       // the same digest a live service reports, without position
};

// Keys in this order: workers, streams, blocks, distinct_blocks, nodes, tiers, edge_lengths_from,
// edge_length_histogram, events_by_type, events_by_result, duplicates, gaps, missing_events,
// resets, bad_lines, digest.
std::string encode_offline_stats(const OfflineStats& stats);

}  // namespace kvidx
