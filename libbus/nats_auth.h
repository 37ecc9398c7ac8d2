// NatsAuth: how a NATS connection authenticates and encrypts (the nats CLI's options), without
// nats.c types, so service and client configuration can carry it without including nats.h.
#pragma once

#include <string>

namespace kvidx::bus {

// How a connection authenticates and encrypts: the nats CLI's options. Secrets (password, token,
// the seeds inside the files) live only here and in nats.c; nothing in kvidx logs or prints them
// (describe_auth() says what is set without the values).
struct NatsAuth {
  std::string creds_file;      // user JWT + nkey seed (.creds): decentralised (operator/account) auth
  std::string nkey_seed_file;  // a user nkey seed ("SU..."); the public key is derived from it
  std::string user;            // with password
  std::string password;        // secret
  std::string token;           // secret
  std::string tls_cert;        // client certificate (mutual TLS), with tls_key
  std::string tls_key;
  std::string tls_ca;        // CA bundle that signs the server's certificate
  bool tls_first = false;    // TLS before the server's INFO: not supported by libnats 3.4.1
  std::string inbox_prefix;  // replies and pull consumers use <prefix>.<id> instead of _INBOX.<id>

  bool tls() const { return !tls_cert.empty() || !tls_key.empty() || !tls_ca.empty() || tls_first; }
};

// "user kvidx, password (set), tls ca /etc/ca.pem, ..." without any secret; "none" when empty.
std::string describe_auth(const NatsAuth& auth);

}  // namespace kvidx::bus
