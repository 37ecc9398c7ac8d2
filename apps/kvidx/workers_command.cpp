// kvidx workers / kvidx remove-worker: an operator's view of which (worker, rank) streams a running
// kvidx holds, and the way to drop one (kv.admin.workers, kv.admin.remove_worker). Under the
// least-privilege permissions (deploy/nats/permissions.conf) only the operator role may call them.

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "apps/kvidx/cli_command.h"
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

int run_workers(const LiveFlags& flags) {
  int exit_code = kExitOk;
  auto client = LiveClient::connect(flags, "workers", exit_code);
  if (!client) return exit_code;
  auto reply = client->request(client->subjects().admin_workers(), "{}", exit_code);
  if (!reply) return exit_code;
  auto decoded = decode_workers_reply(*reply);
  if (!decoded.ok()) {
    std::fprintf(stderr, "kvidx workers: the service answered: %s\n", reply->c_str());
    return kExitFailure;
  }
  std::cout << encode_workers_reply(decoded.value()) << '\n';
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
  if (!is_ok_reply(*reply)) {
    std::fprintf(stderr, "kvidx remove-worker: the service answered: %s\n", reply->c_str());
    return kExitFailure;
  }
  std::fprintf(stderr, "kvidx remove-worker: worker %llu%s removed\n", static_cast<unsigned long long>(flags.worker_id),
               flags.dp_rank ? (" rank " + std::to_string(*flags.dp_rank)).c_str() : " (every rank)");
  return kExitOk;
}

}  // namespace

void add_workers_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<LiveFlags>();
  Command& cmd =
      app.add_subcommand("workers", "List the (worker, rank) streams a running kvidx holds, with their blocks");
  add_live_flags(cmd, *flags);
  add_shard_flag(cmd, *flags);
  cmd.footer(
      "Prints one JSON object: {\"workers\":[...],\"streams\":[{\"worker_id\",\"dp_rank\",\"blocks\"}]}.\n"
      "Example: kvidx workers --nats nats://127.0.0.1:4222 | jq '.streams[]'");
  cmd.callback([flags, &exit_code] { exit_code = run_workers(*flags); });

  auto remove = std::make_shared<RemoveFlags>();
  Command& rm = app.add_subcommand("remove-worker", "Drop a worker's blocks (every rank, or one) from a running kvidx");
  add_live_flags(rm, remove->live);
  rm.add_option("--worker-id", remove->worker_id, "Worker to remove").required();
  rm.add_option("--dp-rank", remove->dp_rank, "Only this data-parallel rank (default: every rank)");
  rm.footer(
      "Every replica of the service removes it. Example:\n"
      "  kvidx remove-worker --nats tls://nats.internal:4222 --creds operator.creds --worker-id 7");
  rm.callback([remove, &exit_code] { exit_code = run_remove(*remove); });
}

}  // namespace kvidx::cli
