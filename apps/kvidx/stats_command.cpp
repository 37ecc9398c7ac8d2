// kvidx stats: one JSON object describing an index (workers, ranks, blocks, nodes, edge-length
// histogram, events by type), live from a service or offline from an event log.

#include <cstdio>
#include <iostream>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/live_client.h"
#include "apps/kvidx/nats_flags.h"
#include "apps/kvidx/offline_index.h"
#include "libcodec/query_codec.h"
#include "libcodec/stats_codec.h"
#include "libindexer/index_digest.h"
#include "replay/dump_view.h"

namespace kvidx::cli {
namespace {

struct StatsFlags {
  OfflineFlags offline;
  LiveFlags live;
  bool all = false;       // every replica's digest and position (kv.admin.replicas)
  double window_s = 1.0;  // --all: how long replies are collected
};

// kvidx stats --all: one request on kv.admin.replicas, every replica's reply collected for the
// window. Replicas at the same position must have the same digest total; "agree" says whether
// they all are at one position with one total (null when positions differ: compare again once the
// stream is quiet).
int run_all(const StatsFlags& flags) {
  int exit_code = kExitOk;
  auto client = LiveClient::connect(flags.live, "stats", exit_code);
  if (!client) return exit_code;
  const auto replies =
      client->gather(client->subjects().admin_replicas(), R"({"digest":"total"})", flags.window_s, exit_code);
  if (replies.empty()) return exit_code;
  std::vector<StatsReply> replicas;
  for (const std::string& reply : replies) {
    auto decoded = decode_stats_reply(reply);
    if (!decoded.ok() || !decoded.value().digest) {
      std::fprintf(stderr, "kvidx stats: a replica answered: %s\n", reply.c_str());
      exit_code = kExitFailure;
      continue;
    }
    replicas.push_back(std::move(decoded.value()));
  }
  std::cout << encode_replicas_summary(std::move(replicas)) << '\n';
  return exit_code;
}

int run_live(const StatsFlags& flags) {
  int exit_code = kExitOk;
  auto client = LiveClient::connect(flags.live, "stats", exit_code);
  if (!client) return exit_code;
  auto reply = client->request_retrying(client->subjects().admin_stats(), R"({"digest":"streams"})", exit_code);
  if (!reply) return exit_code;
  auto decoded = decode_stats_reply(*reply);
  if (!decoded.ok()) {
    if (decode_error_reply(*reply)) {
      std::fprintf(stderr, "kvidx stats: the service answered: %s\n", reply->c_str());
    } else {
      std::fprintf(stderr, "kvidx stats: the service's reply is not a stats reply (%s): %s\n",
                   decoded.error().message().c_str(), reply->c_str());
    }
    return kExitFailure;
  }
  auto events = client->dump(exit_code);
  if (!events) return exit_code;
  DumpView view;
  for (const auto& event : *events) view.add(event);
  const DumpSummary summary = view.summary();
  // NOTE: a live service does not expose its node layout, so lengths come from the dump's view.
  const TreeShape shape{summary.distinct_blocks, "dump", summary.edge_length_histogram};
  std::cout << encode_live_stats(decoded.value(), shape) << '\n';
  return kExitOk;
}

int run_offline(StatsFlags& flags) {
  flags.offline.quiet = true;
  auto built = build_offline_index(flags.offline, "stats");
  if (built.exit_code != kExitOk && built.exit_code != kExitBadInput) return built.exit_code;
  LaneIndexer& indexer = *built.indexer;
  const ShardSizes sizes = indexer.shard_sizes();
  std::map<std::size_t, std::size_t> histogram;
  for (auto length : indexer.tree().node_edge_lengths()) ++histogram[length];
  std::size_t distinct_blocks = 0;
  for (const auto& [length, count] : histogram) distinct_blocks += length * count;
  OfflineStats out;
  out.workers = indexer.get_workers().size();
  out.streams = sizes.worker_count;
  out.blocks = sizes.block_count;
  out.nodes = sizes.node_count;
  out.shape = TreeShape{distinct_blocks, "tree", std::move(histogram)};
  for (std::size_t kind = 0; kind < 3; ++kind) {
    out.events_by_type.emplace_back(to_string(static_cast<EventKind>(kind)), built.summary.events_by_kind[kind]);
  }
  for (std::size_t status = 0; status < LaneIndexerMetrics::kStatuses; ++status) {
    out.events_by_result.emplace_back(to_string(static_cast<ApplyStatus>(status)),
                                      built.summary.applied.applied_with(static_cast<ApplyStatus>(status)));
  }
  out.duplicates = built.summary.intake.duplicates();
  out.gaps = built.summary.intake.gaps;
  out.missing_events = built.summary.intake.missing_events;
  out.resets = built.summary.intake.resets;
  out.bad_lines = built.summary.read.bad_lines;
  // Every tier, device included, as the live stats' "tiers"; the fields above are the device tree's.
  const LaneIndexerMetrics applied = indexer.metrics();
  for (const StorageTier tier : kStorageTiers) {
    const std::size_t t = tier_index(tier);
    out.tiers[std::string(to_string(tier))] = TierStats{sizes.streams_by_tier[t], sizes.blocks_by_tier[t],
                                                        sizes.nodes_by_tier[t], applied.applied_by_tier[t]};
  }
  auto dump = indexer.dump_events();
  if (!dump) {
    std::fprintf(stderr, "kvidx stats: the offline index failed\n");
    return kExitFailure;
  }
  // The same digest a live service reports (libindexer/index_digest.h); no stream position.
  const IndexDigest digest = digest_of(*dump);
  out.digest = StatsDigest{{}, std::nullopt, digest_hex(digest.total), digest.blocks, digest.streams.size(), {}};
  std::cout << encode_offline_stats(out) << '\n';
  return built.exit_code;
}

}  // namespace

void add_stats_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<StatsFlags>();
  Command& cmd = app.add_subcommand("stats", "Workers, ranks, blocks, nodes and event counts (live or from a log)");
  add_live_flags(cmd, flags->live, /*live_needs_nats_flag=*/true);
  add_shard_flag(cmd, flags->live);
  add_retries_flag(cmd, flags->live);
  Option& all = cmd.add_flag("--all", flags->all,
                             "Every running replica's digest and stream position (kv.admin.replicas), not one's stats");
  cmd.add_option("--window", flags->window_s, "With --all: seconds to collect the replicas' replies")
      .capture_default_str()
      .check(InRange{0.05, 60.0})
      .needs("--all");
  add_offline_flags(cmd, flags->offline, false);
  cmd.get_option("--nats").excludes("--events");
  cmd.get_option("--events").excludes("--nats");
  all.excludes("--events");
  cmd.footer(
      "Exactly one of --nats [URL] or --events. Prints one JSON object.\n"
      "Examples: kvidx stats --nats nats://127.0.0.1:4222 | jq .blocks\n"
      "          kvidx stats --nats nats://a:4222,nats://b:4222 --all   (replicas' digests and positions)\n"
      "          kvidx stats --events captured.jsonl.gz");
  cmd.callback([flags, &exit_code] {
    if (flags->live.nats.url.empty() && flags->offline.events.empty()) {
      std::fprintf(stderr,
                   "kvidx stats: give --nats [URL] (live; URL defaults to $NATS_URL, else %s) or --events FILE "
                   "(offline)\n",
                   kDefaultNatsUrl);
      exit_code = kExitUsage;
      return;
    }
    exit_code = flags->live.nats.url.empty() ? run_offline(*flags) : flags->all ? run_all(*flags) : run_live(*flags);
  });
}

}  // namespace kvidx::cli
