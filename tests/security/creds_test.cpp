// Decentralised (operator/account/user JWT) auth with --creds FILE against a real nats-server in
// operator mode, configured fully offline: the operator's JWT, a memory resolver preloaded with the
// account JWTs (a system account, which JetStream needs in operator mode, and kvidx's account with
// JetStream enabled). The .creds files are minted here (tests/support/nats_jwt.h). A user whose
// account the server does not know is refused; a user JWT's permissions are enforced. The seed in a
// .creds file never reaches an output or a log.
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/security/security_support.h"
#include "tests/support/nats_jwt.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

// What kvidx's commands use: JetStream's API and acks, the kv.* subjects, replies to inboxes.
const UserPermissions kKvidxPermissions{
    {{"$JS.API.>", "$JS.ACK.>", "kv.>", "_INBOX.>"}, {}},
    {{"kv.>", "_INBOX.>"}, {}},
};

// An operator, its system account and kvidx's account (JetStream enabled).
struct Trust {
  NkeyPair op = NkeyPair::generate(bus::NkeyType::operator_key);
  NkeyPair system = NkeyPair::generate(bus::NkeyType::account);
  NkeyPair account = NkeyPair::generate(bus::NkeyType::account);
};

// nats-server in operator mode, nothing fetched: `resolver: MEMORY` with every account JWT preloaded.
NatsServerOptions operator_mode_server(const TempDir& dir, const Trust& trust) {
  const std::string operator_file =
      write_file(dir, "operator.jwt", operator_jwt(trust.op, "kvidx-test-operator", trust.system.public_key));
  const std::string system_jwt = account_jwt(trust.system, trust.op, "SYS", JetStream::disabled);
  const std::string kvidx_jwt = account_jwt(trust.account, trust.op, "KVIDX", JetStream::enabled);
  return server_with_config(dir, "operator: \"" + operator_file + "\"\n" +
                                     "system_account: " + trust.system.public_key + "\n" + "resolver: MEMORY\n" +
                                     "resolver_preload: {\n" + "  " + trust.system.public_key + ": \"" + system_jwt +
                                     "\"\n" + "  " + trust.account.public_key + ": \"" + kvidx_jwt + "\"\n" + "}\n");
}

// A user of `account` with `permissions`: its .creds file in `dir` and its seed (to look for in outputs).
struct CredsUser {
  std::string creds_file;
  std::string seed;
};

CredsUser make_user(const TempDir& dir, const std::string& name, const NkeyPair& account,
                    const UserPermissions& permissions) {
  const NkeyPair user = NkeyPair::generate(bus::NkeyType::user);
  REQUIRE(user.seed.rfind("SU", 0) == 0);
  return {write_file(dir, name + ".creds", creds_text(user_jwt(user, account, name, permissions), user.seed)),
          user.seed};
}

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_SUITE("security") {

TEST_CASE(
    "a .creds user (JWT signed by its account, operator-mode server with a preloaded memory resolver) authenticates "
    "kvidx serve and kvidx workers") {
  TempDir dir;
  const Trust trust;
  NatsServer server(operator_mode_server(dir, trust));
  const CredsUser user = make_user(dir, "kvidx", trust.account, kKvidxPermissions);
  std::vector<CommandResult> results;
  // serve consumes through JetStream (its default mode): it works only if the account has JetStream.
  const std::string log = serve_and_ask(dir, {"--nats", server.url(), "--creds", user.creds_file}, results);
  CHECK_MESSAGE(log.find("kvidx serving: mode jetstream") != std::string::npos, log << "\nnats-server:\n"
                                                                                    << server.log());
  CHECK_MESSAGE(log.find(user.seed) == std::string::npos, "the seed is in serve's log");
  CHECK(log.find("Violation") == std::string::npos);
  check_clean(results, user.seed);
}

TEST_CASE(
    "a .creds user whose JWT is signed by an account the server does not know is refused with exit 4 and one line") {
  TempDir dir;
  const Trust trust;
  NatsServer server(operator_mode_server(dir, trust));
  // Signed correctly, but by an account no operator JWT vouches for (the resolver does not have it).
  const NkeyPair stranger = NkeyPair::generate(bus::NkeyType::account);
  const CredsUser user = make_user(dir, "stranger", stranger, kKvidxPermissions);
  std::vector<CommandResult> results;
  for (const char* command : {"workers", "serve"}) {
    CAPTURE(command);
    results.push_back(run_command({kvidx_binary(), command, "--nats", server.url(), "--creds", user.creds_file}));
    const CommandResult& refused = results.back();
    CHECK(refused.exit_code == 4);
    CHECK_MESSAGE(refused.err.find("Authorization Violation") != std::string::npos, refused.err);
    CHECK_MESSAGE(lines(refused.err) == 1, refused.err);
  }
  // The server is in operator mode: no credentials at all are refused the same way.
  results.push_back(run_command({kvidx_binary(), "workers", "--nats", server.url()}));
  CHECK(results.back().exit_code == 4);
  CHECK_MESSAGE(results.back().err.find("Authorization Violation") != std::string::npos, results.back().err);
  check_clean(results, user.seed);
}

TEST_CASE("a .creds user whose JWT denies kv.admin.> gets a Permissions Violation from kvidx workers, exit 4") {
  TempDir dir;
  const Trust trust;
  NatsServer server(operator_mode_server(dir, trust));
  const CredsUser service = make_user(dir, "kvidx", trust.account, kKvidxPermissions);
  UserPermissions no_admin = kKvidxPermissions;
  no_admin.publish.deny = {"kv.admin.>"};
  const CredsUser router = make_user(dir, "router", trust.account, no_admin);

  ChildProcess serve(
      {kvidx_binary(), "serve", "--metrics", "off", "--nats", server.url(), "--creds", service.creds_file},
      dir.file("serve.log"));
  std::vector<CommandResult> results;
  // The service answers (so a refusal below is the permission, not a missing service)...
  CHECK(wait_until(
      [&] {
        results.push_back(run_command(
            {kvidx_binary(), "workers", "--timeout", "0.5", "--nats", server.url(), "--creds", service.creds_file}));
        return results.back().exit_code == 0;
      },
      std::chrono::seconds(30)));
  // ...and scores for the restricted user, whose JWT allows kv.query.scores...
  results.push_back(run_command(
      {kvidx_binary(), "score", "--hashes", "1,2,3", "--nats", server.url(), "--creds", router.creds_file}));
  CHECK_MESSAGE(results.back().exit_code == 0, results.back().err);
  // ...but the server stops its admin request.
  results.push_back(run_command({kvidx_binary(), "workers", "--nats", server.url(), "--creds", router.creds_file}));
  const CommandResult& denied = results.back();
  CHECK(denied.exit_code == 4);
  CHECK_MESSAGE(denied.err.find("Permissions Violation for Publish to \"kv.admin.workers\"") != std::string::npos,
                denied.err);
  CHECK(serve.stop() == 0);
  const std::string log = slurp(dir.file("serve.log")) + slurp(dir.file("serve.log.err"));
  for (const std::string& seed : {service.seed, router.seed}) {
    CHECK(log.find(seed) == std::string::npos);
    check_clean(results, seed);
  }
}

}  // TEST_SUITE("security")
