#include "libbus/nats_auth.h"

#include <vector>

namespace kvidx::bus {

std::string describe_auth(const NatsAuth& auth) {
  std::vector<std::string> parts;
  if (!auth.creds_file.empty()) parts.push_back("creds " + auth.creds_file);
  if (!auth.nkey_seed_file.empty()) parts.push_back("nkey " + auth.nkey_seed_file);
  if (!auth.user.empty()) parts.push_back("user " + auth.user);
  if (!auth.password.empty()) parts.emplace_back("password (set)");
  if (!auth.token.empty()) parts.emplace_back("token (set)");
  if (!auth.tls_ca.empty()) parts.push_back("tls ca " + auth.tls_ca);
  if (!auth.tls_cert.empty()) parts.push_back("tls cert " + auth.tls_cert + " key " + auth.tls_key);
  if (auth.tls_first) parts.emplace_back("tls first");
  if (!auth.inbox_prefix.empty()) parts.push_back("inbox prefix " + auth.inbox_prefix);
  if (parts.empty()) return "none";
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace kvidx::bus
