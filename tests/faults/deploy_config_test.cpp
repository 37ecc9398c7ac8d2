// Deployment files, checked without a Docker engine: the kvidx config docker-compose.yml mounts is
// parsed and validated by `kvidx serve --check-config`, and the same file runs `kvidx serve`
// against a test nats-server (NATS URL and metrics address overridden on the command line); the
// compose file mounts it where the Dockerfile's command reads it; the Dockerfile's build stage
// installs every build package scripts/lib.sh installs.
#include <doctest/doctest.h>

#include <signal.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "replay/event_log_writer.h"
#include "tests/faults/fault_support.h"
#include "tests/support/event_builders.h"
#include "tests/support/http_probe.h"
#include "tests/support/wait_until.h"

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
  const auto result =
      testing::run_command({testing::built_binary("kvidx"), "serve", "--config", kConfig, "--check-config"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  // The secrets are named (files mounted by the compose file), never read here: they need not exist.
  CHECK(result.out.find(
            "config ok: nats tls://nats:4222 (auth: nkey /run/secrets/kvidx_nkey, tls ca /run/secrets/nats_ca, "
            "tls cert /run/secrets/kvidx_cert key /run/secrets/kvidx_key, inbox prefix _INBOX_kvidx), "
            "mode jetstream, 4 lanes, prefix 'kv', durable 'kvidx', metrics 127.0.0.1:9464") == 0);
  CHECK(result.out.find("max message bytes 8388608, max blocks per event 1048576") != std::string::npos);
  // A broken config is a usage error, not a silent default.
  TempDir dir;
  std::ofstream(dir.file("bad.toml")) << "lanes = 0\n";
  CHECK(testing::run_command(
            {testing::built_binary("kvidx"), "serve", "--config", dir.file("bad.toml"), "--check-config"})
            .exit_code == 2);
  std::ofstream(dir.file("typo.toml")) << "snapshot-interval = \"soon\"\n";
  CHECK(testing::run_command(
            {testing::built_binary("kvidx"), "serve", "--config", dir.file("typo.toml"), "--check-config"})
            .exit_code == 2);
}

TEST_CASE(
    "deploy: kvidx serve runs with the compose config against the deployment's secured nats-server and stops cleanly") {
  // deploy/make-secrets makes the CA, certificates, nkeys and auth.conf; deploy/nats/nats-server.conf
  // runs with them (its /etc/nats and /data paths, ports and store moved into the test's temp dir).
  TempDir dir;
  const std::string secrets = dir.file("secrets");
  const auto made = testing::run_command({std::string(KVIDX_SOURCE_DIR) + "/deploy/make-secrets", "--dir", secrets,
                                          "--workers", "1", "--kvidx", testing::built_binary("kvidx")});
  REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  std::string conf = source_file("deploy/nats/nats-server.conf");
  const int http_port = testing::find_free_port();
  conf = std::regex_replace(conf, std::regex("/etc/nats/secrets/"), secrets + "/");
  // The test's server fixture gives its own store dir (-sd) and port (-p).
  conf = std::regex_replace(conf, std::regex("store_dir: /data"), "");
  conf =
      std::regex_replace(conf, std::regex("\nhttp: 8222"), "\nhttp: \"127.0.0.1:" + std::to_string(http_port) + "\"");
  std::ofstream(dir.file("nats-server.conf")) << conf;
  std::ofstream(dir.file("permissions.conf")) << source_file("deploy/nats/permissions.conf");
  std::ofstream(dir.file("auth.conf")) << testing::read_text(secrets + "/auth.conf");
  const auto checked = testing::run_command({"/usr/sbin/nats-server", "-c", dir.file("nats-server.conf"), "-t"});
  REQUIRE_MESSAGE(checked.exit_code == 0, checked.out << checked.err);
  NatsServer server(testing::NatsServerOptions::with_args({"-c", dir.file("nats-server.conf")}));
  const std::string url = "tls://127.0.0.1:" + std::to_string(server.port());
  auto as = [&](const std::string& role, std::vector<std::string> args, const std::string& inbox) {
    std::vector<std::string> out = {testing::built_binary("kvidx")};
    out.insert(out.end(), args.begin(), args.end());
    for (const std::string& a :
         {std::string("--nats"), url, std::string("--tlsca"), secrets + "/ca.pem", std::string("--tlscert"),
          secrets + "/" + role + ".pem", std::string("--tlskey"), secrets + "/" + role + ".key", std::string("--nkey"),
          secrets + "/" + role + ".nk", std::string("--inbox-prefix"), inbox}) {
      out.push_back(a);
    }
    return out;
  };
  const int metrics_port = testing::find_free_port();
  // The compose config as is, but for where the server and the secrets are.
  testing::ChildProcess serve(
      as("kvidx", {"serve", "--config", kConfig, "--metrics", "127.0.0.1:" + std::to_string(metrics_port)},
         "_INBOX_kvidx"),
      dir.file("serve.log"));
  REQUIRE_MESSAGE(
      testing::wait_until(
          [&] {
            return testing::run_command(as("operator", {"workers", "--timeout", "0.5"}, "_INBOX_operator")).exit_code ==
                   0;
          },
          std::chrono::seconds(30)),
      testing::read_text(dir.file("serve.log.err")));
  {
    EventLogWriter out(dir.file("events.jsonl"));
    out.write(testing::make_store_event(1, {1, 2, 3}));
    REQUIRE(out.close());
  }
  const auto published =
      testing::run_command(as("worker-1", {"publish", "--events", dir.file("events.jsonl")}, "_INBOX_worker1"));
  CHECK_MESSAGE(published.exit_code == 0, published.err);
  testing::CommandResult score;
  CHECK_MESSAGE(testing::wait_until(
                    [&] {
                      score = testing::run_command(as("router", {"score", "--hashes", "1,2,3"}, "_INBOX_router"));
                      return score.exit_code == 0 &&
                             nlohmann::json::parse(score.out)["scores"] ==
                                 nlohmann::json::parse(R"([{"worker_id":1,"dp_rank":0,"score":3}])");
                    },
                    std::chrono::seconds(15)),
                score.out << score.err);
  // The router may not change the index; a client without the deployment's certificate gets nowhere.
  CHECK(testing::run_command(as("router", {"remove-worker", "--worker-id", "1", "--timeout", "1"}, "_INBOX_router"))
            .exit_code == 4);
  CHECK(testing::run_command({testing::built_binary("kvidx"), "workers", "--nats", url, "--tlsca", secrets + "/ca.pem",
                              "--nkey", secrets + "/router.nk"})
            .exit_code == 4);
  CHECK(serve.stop(SIGTERM) == 0);
  CHECK(testing::read_text(dir.file("serve.log")).find("Permissions Violation") == std::string::npos);
}

TEST_CASE(
    "deploy: docker-compose mounts the config where the Dockerfile reads it, the Dockerfile has lib.sh's build "
    "packages") {
  const std::string compose = source_file("docker-compose.yml");
  const std::string dockerfile = source_file("Dockerfile");
  CHECK(compose.find("./deploy/kvidx.toml:/etc/kvidx/kvidx.toml:ro") != std::string::npos);
  CHECK(compose.find(R"(["serve", "--config", "/etc/kvidx/kvidx.toml"])") != std::string::npos);
  CHECK(dockerfile.find(R"(CMD ["serve", "--config", "/etc/kvidx/kvidx.toml"])") != std::string::npos);
  CHECK(compose.find("./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro") != std::string::npos);
  // Prometheus scrapes kvidx's loopback metrics address from kvidx's network namespace; nothing of
  // kvidx or NATS's monitoring is published, NATS's client port only on loopback by default.
  CHECK(source_file("deploy/prometheus.yml").find("\"127.0.0.1:9464\"") != std::string::npos);
  CHECK(source_file("deploy/kvidx.toml").find("metrics = \"127.0.0.1:9464\"") != std::string::npos);
  CHECK(compose.find("network_mode: \"service:kvidx\"") != std::string::npos);
  CHECK(compose.find("\"${KVIDX_NATS_BIND:-127.0.0.1}:4222:4222\"") != std::string::npos);
  CHECK(compose.find("8222:") == std::string::npos);
  CHECK(compose.find("9464:") == std::string::npos);
  CHECK(compose.find("\"127.0.0.1:9090:9090\"") != std::string::npos);
  for (const char* secret : {"ca.pem", "kvidx.pem", "kvidx.key", "kvidx.nk", "auth.conf"}) {
    CHECK_MESSAGE(compose.find(std::string("./deploy/secrets/") + secret) != std::string::npos, secret);
  }
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
    CHECK_MESSAGE(std::regex_search(build_stage, std::regex("[ \\n]" + pkg + "[ \\n\\\\]")),
                  "Dockerfile lacks " << pkg);
  }
  CHECK(checked >= 15);
}
}  // TEST_SUITE("deploy")

TEST_SUITE("deploy") {

TEST_CASE(
    "deploy: the compose cluster profile runs three NATS nodes whose config passes nats-server -t and two "
    "kvidx replicas with their own durables") {
  const std::string compose = source_file("docker-compose.yml");
  for (const char* node : {"nats-1", "nats-2", "nats-3"}) {
    CHECK_MESSAGE(compose.find(std::string("\"-c\", \"/etc/nats/nats-cluster.conf\", \"--server_name\", \"") + node +
                               "\"") != std::string::npos,
                  node);
    CHECK_MESSAGE(source_file("deploy/nats/nats-cluster.conf").find(std::string("nats-route://") + node + ":6222") !=
                      std::string::npos,
                  node);
    // kvidx verifies the server's certificate for each node's name.
    CHECK_MESSAGE(source_file("deploy/make-secrets").find(node) != std::string::npos, node);
  }
  CHECK(compose.find("./deploy/nats/nats-cluster.conf:/etc/nats/nats-cluster.conf:ro") != std::string::npos);
  CHECK(compose.find("profiles: [\"cluster\"]") != std::string::npos);
  // Each replica: the compose config with the three URLs and its own durable (a replica must read
  // every event, so two replicas never share a durable). The command line as compose gives it.
  // Its metrics listen on the compose network (unpublished) for the cluster's Prometheus, which
  // scrapes each replica by its service name.
  const std::regex command(
      R"re(command: \["serve", "--config", "/etc/kvidx/kvidx.toml", "--nats", "([^"]+)", "--durable", "([^"]+)", "--metrics", "([^"]+)"\])re");
  const std::string scrape = source_file("deploy/prometheus-cluster.yml");
  std::set<std::string> durables;
  for (auto it = std::sregex_iterator(compose.begin(), compose.end(), command); it != std::sregex_iterator(); ++it) {
    const std::string urls = (*it)[1];
    const std::string durable = (*it)[2];
    const std::string metrics = (*it)[3];
    CHECK(urls == "tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222");
    CHECK(metrics == "0.0.0.0:9464");
    durables.insert(durable);
    const auto result = testing::run_command({testing::built_binary("kvidx"), "serve", "--config", kConfig, "--nats",
                                              urls, "--durable", durable, "--metrics", metrics, "--check-config"});
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    CHECK(result.out.find("config ok: nats " + urls) == 0);
    CHECK(result.out.find("durable '" + durable + "'") != std::string::npos);
    CHECK(result.out.find("stream replicas auto") != std::string::npos);
    CHECK_MESSAGE(scrape.find("\"" + durable + ":9464\"") != std::string::npos, durable);
  }
  CHECK(durables == std::set<std::string>{"kvidx-a", "kvidx-b"});
  for (const char* node : {"nats-1:8222", "nats-2:8222", "nats-3:8222"}) {
    CHECK_MESSAGE(scrape.find(node) != std::string::npos, node);
  }
  CHECK(compose.find("./deploy/prometheus-cluster.yml:/etc/prometheus/prometheus.yml:ro") != std::string::npos);
  CHECK(compose.find("./deploy/grafana/provisioning-cluster:/etc/grafana/provisioning:ro") != std::string::npos);
  CHECK(source_file("deploy/grafana/provisioning-cluster/datasources/prometheus.yml")
            .find("url: http://prometheus-cluster:9090") != std::string::npos);

  // The node config (the single server's plus the cluster block) parses, secrets and paths moved
  // into a temp dir as in the single-server test above.
  TempDir dir;
  const std::string secrets = dir.file("secrets");
  const auto made = testing::run_command({std::string(KVIDX_SOURCE_DIR) + "/deploy/make-secrets", "--dir", secrets,
                                          "--kvidx", testing::built_binary("kvidx")});
  REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  std::string conf =
      std::regex_replace(source_file("deploy/nats/nats-server.conf"), std::regex("/etc/nats/secrets/"), secrets + "/");
  conf = std::regex_replace(conf, std::regex("store_dir: /data"), "store_dir: \"" + dir.file("js") + "\"");
  std::ofstream(dir.file("nats-server.conf")) << conf;
  std::ofstream(dir.file("nats-cluster.conf")) << source_file("deploy/nats/nats-cluster.conf");
  std::ofstream(dir.file("permissions.conf")) << source_file("deploy/nats/permissions.conf");
  std::ofstream(dir.file("auth.conf")) << testing::read_text(secrets + "/auth.conf");
  const auto checked = testing::run_command(
      {"/usr/sbin/nats-server", "-c", dir.file("nats-cluster.conf"), "--server_name", "nats-1", "-t"});
  CHECK_MESSAGE(checked.exit_code == 0, checked.out << checked.err);
  // The server certificate names every node (kvidx connects to tls://nats-N:4222 and verifies it).
  const auto text =
      testing::run_command({"/usr/bin/openssl", "x509", "-in", secrets + "/server.pem", "-noout", "-text"});
  for (const char* node : {"DNS:nats-1", "DNS:nats-2", "DNS:nats-3"}) {
    CHECK_MESSAGE(text.out.find(node) != std::string::npos, node);
  }
}

}  // TEST_SUITE("deploy")

TEST_SUITE("deploy") {

TEST_CASE(
    "deploy: the Grafana dashboard is provisioned by the monitoring profile and queries only metrics kvidx "
    "serves") {
  const std::string compose = source_file("docker-compose.yml");
  CHECK(compose.find("./deploy/grafana/provisioning:/etc/grafana/provisioning:ro") != std::string::npos);
  CHECK(compose.find("./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro") != std::string::npos);
  CHECK(source_file("deploy/grafana/provisioning/dashboards/kvidx.yml").find("path: /var/lib/grafana/dashboards") !=
        std::string::npos);
  CHECK(source_file("deploy/grafana/provisioning/datasources/prometheus.yml").find("url: http://127.0.0.1:9090") !=
        std::string::npos);
  const nlohmann::json dashboard = nlohmann::json::parse(source_file("deploy/grafana/dashboards/kvidx.json"));
  std::set<std::string> used;
  const std::regex metric("kvidx_[a-z_]+");
  for (const auto& panel : dashboard.at("panels")) {
    for (const auto& target : panel.at("targets")) {
      const std::string expr = target.at("expr");
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric); it != std::sregex_iterator(); ++it) {
        std::string name = it->str();
        if (name.size() > 7 && name.substr(name.size() - 7) == "_bucket") name.resize(name.size() - 7);
        used.insert(name);
      }
    }
  }
  CHECK(used.size() >= 10);
  // A running kvidx's /metrics has every one of them.
  NatsServer server;
  TempDir dir;
  const int port = testing::find_free_port();
  ServeProcess serve(server, dir, "dash",
                     {"--nats", server.url(), "--durable", "dash", "--metrics", "127.0.0.1:" + std::to_string(port)},
                     /*default_flags=*/false);
  bus::Connection conn = connect_to(server);
  wait_ready(conn, serve);
  const auto scraped = testing::http_get(port, "/metrics");
  REQUIRE(scraped.has_value());
  for (const std::string& name : used) {
    CHECK_MESSAGE(scraped->body.find("\n" + name) != std::string::npos, name);
  }
  // The panels join kvidx_shard_info on `instance` to name each line's shard: an unsharded kvidx is "all".
  CHECK_MESSAGE(scraped->body.find("\nkvidx_shard_info{shard=\"all\"} 1") != std::string::npos, scraped->body);
  CHECK(serve.stop(SIGTERM) == 0);
}

}  // TEST_SUITE("deploy")
