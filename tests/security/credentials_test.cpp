// Every way to authenticate that the nats CLI offers, against real servers: an nkey seed file, a
// token from a file or the environment, user and password from a file or a nats CLI context. A
// wrong credential is one line and exit 4. Secrets never reach the output, the logs (at trace
// level) or the process's command line.
#include <doctest/doctest.h>

#include <algorithm>

#include "libbus/nats_nkey.h"
#include "tests/security/security_support.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;
using namespace std::chrono_literals;

TEST_SUITE("security") {

TEST_CASE("an nkey user authenticates with --nkey SEEDFILE, a wrong seed is refused with exit 4") {
  TempDir dir;
  const std::string seed = bus::new_nkey_seed(bus::NkeyType::user);
  const auto public_key = bus::nkey_public_from_seed(seed);
  REQUIRE(public_key.has_value());
  REQUIRE(public_key->front() == 'U');
  NatsServer server(server_with_config(dir, "authorization { users = [ { nkey: " + *public_key + " } ] }\n"));
  const std::string seed_file = write_file(dir, "user.nk", seed);
  std::vector<CommandResult> results;
  const std::string log = serve_and_ask(dir, {"--nats", server.url(), "--nkey", seed_file}, results);
  CHECK(log.find(seed) == std::string::npos);

  const std::string wrong = write_file(dir, "wrong.nk", bus::new_nkey_seed(bus::NkeyType::user));
  results.push_back(run_command({kvidx_binary(), "workers", "--nats", server.url(), "--nkey", wrong}));
  CHECK(results.back().exit_code == 4);
  CHECK_MESSAGE(results.back().err.find("Authorization Violation") != std::string::npos, results.back().err);
  results.push_back(run_command(
      {kvidx_binary(), "workers", "--nats", server.url(), "--nkey", write_file(dir, "garbage.nk", "SUNOTASEED")}));
  CHECK(results.back().exit_code != 0);
  check_clean(results, seed);
}

TEST_CASE("a token from --token-file or $NATS_TOKEN authenticates, a wrong one is refused with exit 4") {
  TempDir dir;
  const std::string token = "tok-S3cret-9f1";
  NatsServer server(server_with_config(dir, "authorization { token: \"" + token + "\" }\n"));
  std::vector<CommandResult> results;
  const std::string log =
      serve_and_ask(dir, {"--nats", server.url(), "--token-file", write_file(dir, "token", token)}, results);
  CHECK(log.find(token) == std::string::npos);
  results.push_back(run_command(
      {"/usr/bin/env", "NATS_TOKEN=" + token, kvidx_binary(), "workers", "--nats", server.url(), "--timeout", "0.5"}));
  CHECK(results.back().err.find("Authorization") == std::string::npos);  // no service runs: no reply, not refused
  results.push_back(
      run_command({"/usr/bin/env", "NATS_TOKEN=tok-wrong", kvidx_binary(), "workers", "--nats", server.url()}));
  CHECK(results.back().exit_code == 4);
  CHECK_MESSAGE(results.back().err.find("Authorization Violation") != std::string::npos, results.back().err);
  check_clean(results, token);
}

TEST_CASE("user and password from --password-file or a nats CLI context authenticate, credentials never printed") {
  TempDir dir;
  const std::string password = "pw-Zq81-secret";
  NatsServer server(
      server_with_config(dir, "authorization { users = [ { user: kvidx, password: \"" + password + "\" } ] }\n"));
  std::vector<CommandResult> results;
  const std::string log = serve_and_ask(
      dir, {"--nats", server.url(), "--user", "kvidx", "--password-file", write_file(dir, "pw", password)}, results);
  CHECK(log.find(password) == std::string::npos);
  // A nats CLI context file names the server and the credentials.
  const std::string context = write_file(
      dir, "ctx.json",
      R"({"url":")" + server.url() + R"(","user":"kvidx","password":")" + password + R"(","description":"test"})");
  results.push_back(run_command({kvidx_binary(), "workers", "--context", context, "--timeout", "0.5"}));
  CHECK(results.back().exit_code == 4);  // authenticated, but no service answers
  CHECK_MESSAGE(results.back().err.find("no reply") != std::string::npos, results.back().err);
  results.push_back(run_command({kvidx_binary(), "workers", "--context", context, "--user", "kvidx", "--password-file",
                                 write_file(dir, "bad", "not-it")}));
  CHECK(results.back().exit_code == 4);
  CHECK_MESSAGE(results.back().err.find("Authorization Violation") != std::string::npos, results.back().err);
  // serve --check-config names what is set, never the value.
  results.push_back(
      run_command({kvidx_binary(), "serve", "--check-config", "--nats", "nats://kvidx:" + password + "@127.0.0.1:4222",
                   "--tlsca", "/run/secrets/absent.pem"}));
  CHECK_MESSAGE(results.back().exit_code == 0, results.back().err);
  CHECK(results.back().out.find("nats://***@127.0.0.1:4222") != std::string::npos);
  check_clean(results, password);
}

TEST_CASE("--password, --token and credentials in --nats URLs are wiped from the process's command line") {
  TempDir dir;
  NatsServer server(
      server_with_config(dir, "authorization { users = [ { user: kvidx, password: \"argv-pw-77\" } ] }\n"));
  const std::string url_with_password = "nats://kvidx:argv-pw-77@127.0.0.1:" + std::to_string(server.port());
  for (const auto& args :
       {std::vector<std::string>{"--nats", server.url(), "--user", "kvidx", "--password", "argv-pw-77"},
        std::vector<std::string>{"--nats", url_with_password},
        std::vector<std::string>{"--nats=" + url_with_password}}) {
    CAPTURE(joined(args));
    ChildProcess serve(with({kvidx_binary(), "serve", "--metrics", "off", "--snapshot-interval", "0"}, args),
                       dir.file("serve.log"));
    // Authenticated with the real password (the copy parsed before wiping), so it serves.
    CHECK(wait_until(
        [&] {
          return run_command({kvidx_binary(), "workers", "--nats", url_with_password, "--timeout", "0.5"}).exit_code ==
                 0;
        },
        30s));
    std::string cmdline = slurp("/proc/" + std::to_string(serve.pid()) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    CHECK_MESSAGE(cmdline.find("argv-pw-77") == std::string::npos, cmdline);
    CHECK(cmdline.find("serve") != std::string::npos);
    CHECK(serve.stop() == 0);
  }
}

}  // TEST_SUITE("security")
