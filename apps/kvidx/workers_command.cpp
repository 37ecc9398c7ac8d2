// kvidx workers / kvidx remove-worker: an operator's view of which (worker, rank) streams a running
// kvidx holds, and the way to drop one (kv.admin.workers, kv.admin.remove_worker). Under the
// least-privilege permissions (deploy/nats/permissions.conf) only the operator role may call them.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "apps/kvidx/live_client.h"
#include "libcodec/query_codec.h"

namespace kvidx::cli {
namespace {

struct RemoveFlags {
  LiveFlags live;
  WorkerId worker_id = 0;
  std::optional<DpRank> dp_rank;
};

// The reply's body when it is a JSON object without "error"; else prints why and sets exit_code.
std::optional<nlohmann::json> answered(const char* command, const std::string& reply, int& exit_code) {
  auto json = nlohmann::json::parse(reply, nullptr, false);
  if (json.is_discarded() || !json.is_object() || json.contains("error")) {
    std::fprintf(stderr, "kvidx %s: the service answered: %s\n", command, reply.c_str());
    exit_code = kExitFailure;
    return std::nullopt;
  }
  return json;
}

int run_workers(const LiveFlags& flags) {
  int exit_code = kExitOk;
  auto client = LiveClient::connect(flags, "workers", exit_code);
  if (!client) return exit_code;
  auto reply = client->request(client->subjects().admin_workers(), "{}", exit_code);
  if (!reply) return exit_code;
  auto json = answered("workers", *reply, exit_code);
  if (!json) return exit_code;
  std::cout << json->dump() << '\n';
  return kExitOk;
}

int run_remove(const RemoveFlags& flags) {
  int exit_code = kExitOk;
  auto client = LiveClient::connect(flags.live, "remove-worker", exit_code);
  if (!client) return exit_code;
  auto reply =
      client->request(client->subjects().admin_remove_worker(),
                      encode_remove_worker_request(RemoveWorkerRequest{flags.worker_id, flags.dp_rank}), exit_code);
  if (!reply) return exit_code;
  if (!answered("remove-worker", *reply, exit_code)) return exit_code;
  std::fprintf(stderr, "kvidx remove-worker: worker %llu%s removed\n", static_cast<unsigned long long>(flags.worker_id),
               flags.dp_rank ? (" rank " + std::to_string(*flags.dp_rank)).c_str() : " (every rank)");
  return kExitOk;
}

}  // namespace

void add_workers_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<LiveFlags>();
  auto* cmd = app.add_subcommand("workers", "List the (worker, rank) streams a running kvidx holds, with their blocks");
  add_live_flags(*cmd, *flags);
  cmd->footer(
      "Prints one JSON object: {\"workers\":[...],\"streams\":[{\"worker_id\",\"dp_rank\",\"blocks\"}]}.\n"
      "Example: kvidx workers --nats nats://127.0.0.1:4222 | jq '.streams[]'");
  cmd->callback([flags, &exit_code] { exit_code = run_workers(*flags); });

  auto remove = std::make_shared<RemoveFlags>();
  auto* rm = app.add_subcommand("remove-worker", "Drop a worker's blocks (every rank, or one) from a running kvidx");
  add_live_flags(*rm, remove->live);
  rm->add_option("--worker-id", remove->worker_id, "Worker to remove")->required();
  rm->add_option("--dp-rank", remove->dp_rank, "Only this data-parallel rank (default: every rank)");
  rm->footer(
      "Every replica of the service removes it. Example:\n"
      "  kvidx remove-worker --nats tls://nats.internal:4222 --creds operator.creds --worker-id 7");
  rm->callback([remove, &exit_code] { exit_code = run_remove(*remove); });
}

}  // namespace kvidx::cli
