// The CLI's side of a running kvidx: request/reply on <prefix>.query.* and <prefix>.admin.*, and
// the chunked dump protocol. Errors are printed as one line; the caller returns `exit_code`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/kvidx/nats_flags.h"
#include "libbus/subjects.h"
#include "libindexer/protocol.h"

namespace kvidx::cli {

class Command;

struct LiveFlags {
  NatsFlags nats;
  std::string prefix = "kv";
  double timeout_s = 5;
  // Read-only requests (score, stats): extra attempts when no replica answered (retrying_request.h).
  int retries = 2;
  // --shard I/N (stats, dump, workers): ask that shard of a sharded deployment (<prefix>.shard.I.admin.*).
  std::string shard;
};

// --retries, for the commands whose requests are read-only (score, stats).
void add_retries_flag(Command& cmd, LiveFlags& flags);

// --shard I/N, for the admin commands (stats, dump, workers) in a sharded deployment.
void add_shard_flag(Command& cmd, LiveFlags& flags);

// Adds the NATS connection options (nats_flags.h), --subject-prefix, --timeout.
// `live_needs_nats_flag` (dump, stats): --nats picks the live mode over --events, so nats.url stays
// empty unless it is given ('--nats' alone: the default URL).
void add_live_flags(Command& cmd, LiveFlags& flags, bool live_needs_nats_flag = false);

class LiveClient {
 public:
  ~LiveClient();
  LiveClient(LiveClient&&) noexcept;
  LiveClient& operator=(LiveClient&&) noexcept;

  // Connects; on failure prints why and sets exit_code (kExitUnreachable: down, refused or timed out;
  // kExitUsage: a bad --shard).
  static std::optional<LiveClient> connect(const LiveFlags& flags, const char* command, int& exit_code);

  // The service's subjects (from --subject-prefix, and --shard).
  const bus::Subjects& subjects() const;

  // One request on `subject` (subjects().query_scores(), ...) accepting a chunked reply
  // (libbus/chunked_reply.h: a reply over the server's max_payload arrives in pieces and is
  // reassembled here); the reply body, or nullopt with the error printed and exit_code set
  // (kExitUnreachable: nothing answered; kExitIncomplete: pieces missing). An {"error": ...} reply
  // is returned as is.
  std::optional<std::string> request(const std::string& subject, const std::string& body, int& exit_code);
  // The same for a read-only request, retried (flags.retries) when no replica answered: a replica
  // killed mid-request, or none subscribed for a moment during a failover. `attempts` (optional)
  // receives the attempts made.
  std::optional<std::string> request_retrying(const std::string& subject, const std::string& body, int& exit_code,
                                              int* attempts = nullptr);
  // A score query sent to each of `shards` shards (<prefix>.shard.I.query.scores) and their replies
  // merged here (libbus/shard_scatter.h), instead of through a front; as request_retrying otherwise.
  std::optional<std::string> scatter_scores(const std::string& body, std::uint32_t shards, int& exit_code);
  // Every replica's answer on `subject` (a plain subscription on each: kv.admin.replicas),
  // collected for `window_s` seconds; empty when none answered (exit_code set).
  std::vector<std::string> gather(const std::string& subject, const std::string& body, double window_s, int& exit_code);
  // The whole index as Stored events via <prefix>.admin.dump (chunks until the end marker). The
  // events and chunks received must equal the end marker's counts (else kExitIncomplete); an error
  // end marker is the service's refusal (kExitFailure, its message printed).
  std::optional<std::vector<RouterEvent>> dump(int& exit_code);

 private:
  struct Impl;
  explicit LiveClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvidx::cli
