// Certificates made by the tests themselves (openssl CLI, EC P-256, valid one day): a CA, a server
// certificate for 127.0.0.1/localhost signed by it, a client certificate signed by it (mutual TLS),
// and a second, untrusted CA with its own server certificate. Nothing leaves the temp directory.
#pragma once

#include <string>

namespace kvidx::testing {

struct TestPki {
  std::string ca_cert;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string rogue_ca_cert;  // a CA nobody trusts
  std::string rogue_server_cert, rogue_server_key;
};

// Makes every file under `dir`; throws std::runtime_error (with openssl's output) on failure.
TestPki make_test_pki(const std::string& dir);

}  // namespace kvidx::testing
