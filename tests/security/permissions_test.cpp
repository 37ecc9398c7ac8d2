// Least privilege against a real nats-server whose users have exactly the roles of
// deploy/nats/permissions.conf: kvidx serve as the service, a worker that may publish only its own
// subject, a router that may only ask for scores, an operator with the admin subjects. Each role
// works with its set; what it is denied fails with the server's reason in one line, exit 4, and no
// effect on the index. Passwords come from files and appear in no output or log.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "replay/event_log_writer.h"
#include "tests/security/security_support.h"
#include "tests/support/event_builders.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;
using namespace std::chrono_literals;

namespace {

const char* const kPasswords[] = {"svc-pw-Q1x", "router-pw-Q2y", "op-pw-Q3z", "w7-pw-Q4w"};

std::string users_config() {
  return R"(authorization {
  users = [
    { user: kvidx, password: "svc-pw-Q1x", permissions: $KVIDX_SERVICE }
    { user: router, password: "router-pw-Q2y", permissions: $KVIDX_ROUTER }
    { user: operator, password: "op-pw-Q3z", permissions: $KVIDX_OPERATOR }
    { user: worker7, password: "w7-pw-Q4w", permissions: {
        publish: { allow: ["kv.events.7", "$JS.API.STREAM.INFO.KV_EVENTS"] }
        subscribe: { allow: ["_INBOX_worker7.>"] } } }
  ]
}
)";
}

struct Role {
  std::string user, password_file, inbox;
};

std::vector<std::string> as(const Role& role, const std::string& url, std::vector<std::string> args) {
  std::vector<std::string> out = {kvidx_binary()};
  out.insert(out.end(), args.begin(), args.end());
  for (const std::string& a : {std::string("--nats"), url, std::string("--user"), role.user,
                               std::string("--password-file"), role.password_file}) {
    out.push_back(a);
  }
  if (!role.inbox.empty()) {
    out.push_back("--inbox-prefix");
    out.push_back(role.inbox);
  }
  return out;
}

void write_log(const std::string& path, const std::vector<RouterEvent>& events) {
  EventLogWriter out(path);
  for (const auto& e : events) out.write(e);
  REQUIRE(out.close());
}

// (worker_id, blocks) of every stream `kvidx workers` lists.
std::map<std::uint64_t, std::uint64_t> holdings(const std::string& workers_json) {
  std::map<std::uint64_t, std::uint64_t> out;
  const auto parsed = nlohmann::json::parse(workers_json);
  for (const auto& s : parsed["streams"]) {
    out[s["worker_id"].get<std::uint64_t>()] += s["blocks"].get<std::uint64_t>();
  }
  return out;
}

}  // namespace

TEST_SUITE("security") {

TEST_CASE("least privilege: service, worker, router and operator roles each work and are denied the rest") {
  TempDir dir;
  NatsServer server(server_with_config(dir, include_permissions(dir) + users_config()));
  const std::string url = server.url();
  auto role = [&](const std::string& user, const std::string& password, const std::string& inbox) {
    const std::string file = dir.file(user + ".pw");
    std::ofstream(file) << password << "\n";
    return Role{user, file, inbox};
  };
  const Role service = role("kvidx", kPasswords[0], "_INBOX_kvidx");
  const Role router = role("router", kPasswords[1], "_INBOX_router");
  const Role op = role("operator", kPasswords[2], "_INBOX_operator");
  const Role worker = role("worker7", kPasswords[3], "_INBOX_worker7");
  std::vector<CommandResult> outputs;
  auto run = [&](std::vector<std::string> args) {
    outputs.push_back(run_command(args));
    return outputs.back();
  };

  ChildProcess serve(
      as(service, url, {"--log-level", "debug", "serve", "--metrics", "off", "--snapshot-interval", "1s"}),
      dir.file("serve.log"));
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        return run(as(op, url, {"workers", "--timeout", "0.5"})).exit_code == 0;
                      },
                      30s),
                  slurp(dir.file("serve.log.err")) << outputs.back().err);

  // A worker publishes its own subject...
  write_log(dir.file("own.jsonl"), {make_store_event(7, {1, 2, 3})});
  auto own = run(as(worker, url, {"publish", "--events", dir.file("own.jsonl")}));
  CHECK_MESSAGE(own.exit_code == 0, own.err);
  // ...and not another worker's: refused by the server, named in one line, exit 4.
  write_log(dir.file("other.jsonl"), {make_store_event(8, {1, 2, 3, 4})});
  auto other = run(as(worker, url, {"publish", "--events", dir.file("other.jsonl")}));
  CHECK(other.exit_code == 4);
  CHECK_MESSAGE(other.err.find("Permissions Violation for Publish to \"kv.events.8\"") != std::string::npos, other.err);

  // The router scores...
  nlohmann::json reply;
  CHECK(wait_until(
      [&] {
        auto score = run(as(router, url, {"score", "--hashes", "1,2,3"}));
        if (score.exit_code != 0) return false;
        reply = nlohmann::json::parse(score.out);
        return reply["scores"].size() == 1;
      },
      15s));
  CHECK(reply["scores"][0] == nlohmann::json::parse(R"({"worker_id":7,"dp_rank":0,"score":3})"));
  // ...but may not remove a worker, read stats or dump the index.
  for (const std::vector<std::string>& denied :
       {std::vector<std::string>{"remove-worker", "--worker-id", "7", "--timeout", "1"},
        std::vector<std::string>{"stats", "--timeout", "1"}, std::vector<std::string>{"dump", "--timeout", "1"}}) {
    CAPTURE(denied.front());
    auto result = run(as(router, url, denied));
    CHECK(result.exit_code == 4);
    CHECK_MESSAGE(
        result.err.find("the server refused: Permissions Violation for Publish to \"kv.admin.") != std::string::npos,
        result.err);
  }
  // A router that forgets its inbox prefix cannot receive its reply, and is told why.
  auto no_inbox =
      run(as(Role{router.user, router.password_file, ""}, url, {"score", "--hashes", "1", "--timeout", "1"}));
  CHECK(no_inbox.exit_code == 4);
  CHECK_MESSAGE(no_inbox.err.find("Permissions Violation for Subscription to") != std::string::npos, no_inbox.err);
  CHECK(no_inbox.err.find("--inbox-prefix") != std::string::npos);

  // Nothing denied reached the index: worker 7 holds its 3 blocks, no worker 8.
  auto workers = run(as(op, url, {"workers"}));
  REQUIRE_MESSAGE(workers.exit_code == 0, workers.err);
  const std::map<std::uint64_t, std::uint64_t> only_worker_7{{7, 3}};
  CHECK_MESSAGE(holdings(workers.out) == only_worker_7, workers.out);
  // The operator may remove it.
  auto removed = run(as(op, url, {"remove-worker", "--worker-id", "7"}));
  CHECK_MESSAGE(removed.exit_code == 0, removed.err);
  CHECK(wait_until([&] { return holdings(run(as(op, url, {"workers"})).out).empty(); }, 10s));
  auto stats = run(as(op, url, {"stats"}));
  CHECK_MESSAGE(stats.exit_code == 0, stats.err);

  // The service did everything it needed (stream, consumer, snapshots, replies) with its set.
  CHECK(serve.stop() == 0);
  const std::string serve_log = slurp(dir.file("serve.log")) + slurp(dir.file("serve.log.err"));
  CHECK_MESSAGE(serve_log.find("Permissions Violation") == std::string::npos, serve_log);
  CHECK(serve_log.find("snapshot") != std::string::npos);
  for (const char* password : kPasswords) {
    CAPTURE(password);
    CHECK(serve_log.find(password) == std::string::npos);
    for (const auto& o : outputs) {
      CHECK(o.out.find(password) == std::string::npos);
      CHECK(o.err.find(password) == std::string::npos);
    }
  }
}

}  // TEST_SUITE("security")
