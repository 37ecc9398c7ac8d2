#include "tests/security/security_support.h"

#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace kvidx::testing
