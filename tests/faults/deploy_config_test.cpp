// Deployment files, checked without a Docker engine: the kvidx config docker-compose.yml mounts is
// parsed and validated by `kvidx serve --check-config`, and the same file runs `kvidx serve`
// against a test nats-server (NATS URL and metrics address overridden on the command line); the
// compose file mounts it where the Dockerfile's command reads it; the Dockerfile's build stage
// installs every build package scripts/lib.sh installs.
#include <doctest/doctest.h>

#include <signal.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/faults/fault_support.h"

using namespace kvidx;
using namespace kvidx::faults;
using kvidx::testing::NatsServer;
using kvidx::testing::TempDir;

namespace {

std::string source_file(const std::string& relative) {
  std::ifstream in(std::string(KVIDX_SOURCE_DIR) + "/" + relative);
  REQUIRE_MESSAGE(in.good(), relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kConfig = std::string(KVIDX_SOURCE_DIR) + "/deploy/kvidx.toml";

}  // namespace

TEST_SUITE("deploy") {

TEST_CASE("deploy: the compose file's kvidx.toml passes kvidx serve --check-config with the values it sets") {
  const auto result = testing::run_command({testing::built_binary("kvidx"), "serve", "--config", kConfig, "--check-config"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("config ok: nats nats://nats:4222, mode jetstream, 4 lanes, prefix 'kv', durable 'kvidx', "
                        "metrics 0.0.0.0:9464") == 0);
  CHECK(result.out.find("max message bytes 8388608, max blocks per event 1048576") != std::string::npos);
  // A broken config is a usage error, not a silent default.
  TempDir dir;
  std::ofstream(dir.file("bad.toml")) << "lanes = 0\n";
  CHECK(testing::run_command({testing::built_binary("kvidx"), "serve", "--config", dir.file("bad.toml"), "--check-config"})
            .exit_code == 2);
  std::ofstream(dir.file("typo.toml")) << "snapshot-interval = \"soon\"\n";
  CHECK(testing::run_command({testing::built_binary("kvidx"), "serve", "--config", dir.file("typo.toml"), "--check-config"})
            .exit_code == 2);
}

TEST_CASE("deploy: kvidx serve runs with the compose config against a real nats-server and stops cleanly") {
  NatsServer server;
  TempDir dir;
  const int metrics_port = testing::find_free_port();
  ServeProcess serve(server, dir, "kvidx",
                     {"--config", kConfig, "--nats", server.url(), "--metrics", "127.0.0.1:" + std::to_string(metrics_port)},
                     /*default_flags=*/false);
  bus::Connection conn = connect_to(server);
  const Json stats = wait_ready(conn, serve);
  CHECK(stats.at("lanes") == 4);
  CHECK(stats.at("mode") == "jetstream");
  CHECK(serve.stop(SIGTERM) == 0);
}

TEST_CASE("deploy: docker-compose mounts the config where the Dockerfile reads it, the Dockerfile has lib.sh's build packages") {
  const std::string compose = source_file("docker-compose.yml");
  const std::string dockerfile = source_file("Dockerfile");
  CHECK(compose.find("./deploy/kvidx.toml:/etc/kvidx/kvidx.toml:ro") != std::string::npos);
  CHECK(compose.find(R"(["serve", "--config", "/etc/kvidx/kvidx.toml"])") != std::string::npos);
  CHECK(dockerfile.find(R"(CMD ["serve", "--config", "/etc/kvidx/kvidx.toml"])") != std::string::npos);
  CHECK(compose.find("./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro") != std::string::npos);
  CHECK(source_file("deploy/prometheus.yml").find("kvidx:9464") != std::string::npos);
  // Packages: every one lib.sh installs, except those only the tests and scripts use.
  const std::string lib = source_file("scripts/lib.sh");
  const auto open = lib.find("KVIDX_PACKAGES=(");
  const auto close = lib.find(')', open);
  REQUIRE(open != std::string::npos);
  std::istringstream packages(lib.substr(open + 16, close - open - 16));
  const std::string build_stage = dockerfile.substr(0, dockerfile.find("\nFROM ", dockerfile.find("FROM ") + 1));
  const std::set<std::string> test_only = {"nats-server", "python3", "python3-jsonschema"};
  int checked = 0;
  for (std::string pkg; packages >> pkg;) {
    if (test_only.count(pkg)) continue;
    ++checked;
    CHECK_MESSAGE(std::regex_search(build_stage, std::regex("[ \\n]" + pkg + "[ \\n\\\\]")), "Dockerfile lacks " << pkg);
  }
  CHECK(checked >= 15);
}
}
