// What the security tests share: nats-server configurations written into the test's temp dir
// (TLS with the test's own certificates, users with deploy/nats/permissions.conf's roles), the
// kvidx binary, and a check that no output or log of a test holds a secret.
#pragma once

#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/nats_server.h"

namespace kvidx::testing {

inline const std::string& kvidx_binary() {
  static const std::string path = built_binary("kvidx");
  return path;
}

// Writes `body` as <dir>/nats.conf and returns nats-server options that load it.
NatsServerOptions server_with_config(const TempDir& dir, const std::string& body);

// The tls { } block of a server presenting `cert`/`key`; `verify`: clients must show a certificate
// signed by `ca` (mutual TLS).
std::string tls_block(const std::string& cert, const std::string& key, const std::string& ca, bool verify);

// Copies the repository's deploy/nats/permissions.conf next to the config (nats-server resolves an
// include relative to the including file) and returns the include line.
std::string include_permissions(const TempDir& dir);

// The whole file as text ("" when missing).
std::string slurp(const std::string& path);

// Every argument list joined, for messages.
std::string joined(const std::vector<std::string>& args);

}  // namespace kvidx::testing
