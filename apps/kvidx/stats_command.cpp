// kvidx stats: one JSON object describing an index (workers, ranks, blocks, nodes, edge-length
// histogram, events by type), live from a service or offline from an event log.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/live_client.h"
#include "apps/kvidx/nats_flags.h"
#include "apps/kvidx/offline_index.h"
#include "libcodec/query_codec.h"
#include "replay/dump_view.h"

namespace kvidx::cli {
namespace {

using Json = nlohmann::ordered_json;

struct StatsFlags {
  OfflineFlags offline;
  LiveFlags live;
};

Json histogram_json(const std::map<std::size_t, std::size_t>& histogram) {
  Json out = Json::object();
  for (const auto& [length, count] : histogram) out[std::to_string(length)] = count;
  return out;
}

int run_live(const StatsFlags& flags) {
  int exit_code = kExitOk;
  auto client = LiveClient::connect(flags.live, "stats", exit_code);
  if (!client) return exit_code;
  auto reply = client->request(client->subjects().admin_stats(), "{}", exit_code);
  if (!reply) return exit_code;
  Json out = Json::parse(*reply, nullptr, false);
  if (out.is_discarded() || decode_error_reply(*reply)) {
    std::fprintf(stderr, "kvidx stats: the service answered: %s\n", reply->c_str());
    return kExitFailure;
  }
  auto events = client->dump(exit_code);
  if (!events) return exit_code;
  DumpView view;
  for (const auto& event : *events) view.add(event);
  const DumpSummary summary = view.summary();
  out["distinct_blocks"] = summary.distinct_blocks;
  // NOTE: a live service does not expose its node layout, so lengths come from the dump's view.
  out["edge_lengths_from"] = "dump";
  out["edge_length_histogram"] = histogram_json(summary.edge_length_histogram);
  std::cout << out.dump() << '\n';
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
  Json by_type = Json::object();
  Json by_result = Json::object();
  for (std::size_t kind = 0; kind < 3; ++kind) {
    by_type[std::string(to_string(static_cast<EventKind>(kind)))] = built.summary.events_by_kind[kind];
  }
  for (std::size_t status = 0; status < LaneIndexerMetrics::kStatuses; ++status) {
    by_result[std::string(to_string(static_cast<ApplyStatus>(status)))] =
        built.summary.applied.applied_with(static_cast<ApplyStatus>(status));
  }
  // Every tier, device included, as the live stats' "tiers"; the fields above it are the device tree's.
  const LaneIndexerMetrics applied = indexer.metrics();
  Json tiers = Json::object();
  for (const StorageTier tier : kStorageTiers) {
    const std::size_t t = tier_index(tier);
    tiers[std::string(to_string(tier))] = Json{{"streams", sizes.streams_by_tier[t]},
                                               {"blocks", sizes.blocks_by_tier[t]},
                                               {"nodes", sizes.nodes_by_tier[t]},
                                               {"events_applied", applied.applied_by_tier[t]}};
  }
  Json out{{"workers", indexer.get_workers().size()},
           {"streams", sizes.worker_count},
           {"blocks", sizes.block_count},
           {"distinct_blocks", distinct_blocks},
           {"nodes", sizes.node_count},
           {"tiers", std::move(tiers)},
           {"edge_lengths_from", "tree"},
           {"edge_length_histogram", histogram_json(histogram)},
           {"events_by_type", by_type},
           {"events_by_result", by_result},
           // The intake's ordering counters, named as in the live stats.
           {"duplicates", built.summary.intake.duplicates()},
           {"gaps", built.summary.intake.gaps},
           {"missing_events", built.summary.intake.missing_events},
           {"resets", built.summary.intake.resets},
           {"bad_lines", built.summary.read.bad_lines}};
  std::cout << out.dump() << '\n';
  return built.exit_code;
}

}  // namespace

void add_stats_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<StatsFlags>();
  auto* cmd = app.add_subcommand("stats", "Workers, ranks, blocks, nodes and event counts (live or from a log)");
  add_live_flags(*cmd, flags->live, /*live_needs_nats_flag=*/true);
  add_offline_flags(*cmd, flags->offline, false);
  cmd->get_option("--nats")->excludes("--events");
  cmd->get_option("--events")->excludes("--nats");
  cmd->footer(
      "Exactly one of --nats [URL] or --events. Prints one JSON object.\n"
      "Examples: kvidx stats --nats nats://127.0.0.1:4222 | jq .blocks\n"
      "          kvidx stats --events captured.jsonl.gz");
  cmd->callback([flags, &exit_code] {
    if (flags->live.nats.url.empty() && flags->offline.events.empty()) {
      std::fprintf(stderr,
                   "kvidx stats: give --nats [URL] (live; URL defaults to $NATS_URL, else %s) or --events FILE "
                   "(offline)\n",
                   kDefaultNatsUrl);
      exit_code = kExitUsage;
      return;
    }
    exit_code = flags->live.nats.url.empty() ? run_offline(*flags) : run_live(*flags);
  });
}

}  // namespace kvidx::cli
