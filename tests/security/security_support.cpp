#include "tests/security/security_support.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/wait_until.h"

namespace kvidx::testing {

NatsServerOptions server_with_config(const TempDir& dir, const std::string& body) {
  const std::string path = dir.file("nats.conf");
  std::ofstream(path) << body;
  return NatsServerOptions::with_args({"-c", path});
}

std::string tls_block(const std::string& cert, const std::string& key, const std::string& ca, bool verify) {
  return "tls {\n  cert_file: \"" + cert + "\"\n  key_file: \"" + key + "\"\n  ca_file: \"" + ca +
         "\"\n  verify: " + (verify ? "true" : "false") + "\n  timeout: 5\n}\n";
}

std::string include_permissions(const TempDir& dir) {
  std::filesystem::copy_file(std::string(KVIDX_SOURCE_DIR) + "/deploy/nats/permissions.conf",
                             dir.file("permissions.conf"), std::filesystem::copy_options::overwrite_existing);
  return "include ./permissions.conf\n";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + a;
  return out;
}

std::vector<std::string> with(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text << "\n";
  return dir.file(name);
}

void check_clean(const std::vector<CommandResult>& results, const std::string& secret) {
  for (const auto& r : results) {
    CHECK(r.out.find(secret) == std::string::npos);
    CHECK(r.err.find(secret) == std::string::npos);
  }
}

std::string serve_and_ask(const TempDir& dir, const std::vector<std::string>& auth,
                          std::vector<CommandResult>& results) {
  using namespace std::chrono_literals;
  ChildProcess serve(with({kvidx_binary(), "--log-level", "trace", "serve", "--metrics", "off"}, auth),
                     dir.file("serve.log"));
  const bool answered = wait_until(
      [&] {
        results.push_back(run_command(with({kvidx_binary(), "workers", "--timeout", "0.5"}, auth)));
        return results.back().exit_code == 0;
      },
      30s);
  CHECK_MESSAGE(answered, slurp(dir.file("serve.log.err")) << results.back().err);
  CHECK(serve.stop() == 0);
  return slurp(dir.file("serve.log")) + slurp(dir.file("serve.log.err"));
}

}  // namespace kvidx::testing
