// What the security tests share: nats-server configurations written into the test's temp dir
// (TLS with the test's own certificates, users with deploy/nats/permissions.conf's roles), the
// kvidx binary, a serve-then-ask round trip, and a check that no output or log of a test holds a
// secret.
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

// `head` followed by `tail` (a command and the options every call of a test shares).
std::vector<std::string> with(std::vector<std::string> head, const std::vector<std::string>& tail);

// Writes `text` and a newline as <dir>/<name>; returns the path.
std::string write_file(const TempDir& dir, const std::string& name, const std::string& text);

// CHECKs that no stdout or stderr in `results` holds `secret`.
void check_clean(const std::vector<CommandResult>& results, const std::string& secret);

// `kvidx serve` with `auth` until `kvidx workers` with the same options answers (CHECKed, each
// attempt appended to `results`); stops it (CHECKed: exit 0) and returns its log (stdout and stderr,
// trace level).
std::string serve_and_ask(const TempDir& dir, const std::vector<std::string>& auth,
                          std::vector<CommandResult>& results);

}  // namespace kvidx::testing
