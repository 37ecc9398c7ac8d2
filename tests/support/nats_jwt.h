// Test support: NATS decentralised auth without nsc. Mints the JWTs of an operator, its accounts
// and their users (the claim format of nats-io/jwt v2, signed with libbus's nkeys) and writes a
// user's .creds file, so tests can start nats-server in operator mode fully offline (a preloaded
// memory resolver) and hand kvidx --creds. Test-only: kvidx itself never mints credentials.
#pragma once

#include <string>
#include <vector>

#include "libbus/nats_nkey.h"

namespace kvidx::testing {

// An nkey pair: the seed ("SO...", "SA...", "SU...": a secret) and its public key ("O...", ...).
struct NkeyPair {
  std::string seed;
  std::string public_key;

  static NkeyPair generate(bus::NkeyType type);  // throws std::runtime_error if the seed is unusable
};

// Subjects a user may (allow) or may not (deny) use; empty lists: no restriction of that kind.
struct SubjectRules {
  std::vector<std::string> allow;
  std::vector<std::string> deny;
};

struct UserPermissions {
  SubjectRules publish;
  SubjectRules subscribe;
};

// A JWT is "header.payload.signature", each base64url without padding; the header is
// {"typ":"JWT","alg":"ed25519-nkey"}, the signature Ed25519 over "header.payload" by the issuer's key
// (its public key is the claims' "iss"), "jti" base32 of SHA-512/256 over the standard claims
// without it, "nats": {"type", "version": 2, ...}.

// The operator's self-signed JWT (iss == sub), for nats-server's `operator:`, naming the system
// account (nats-server 2.9 in operator mode starts JetStream only with a system account).
std::string operator_jwt(const NkeyPair& op, const std::string& name, const std::string& system_account);

enum class JetStream : bool { disabled, enabled };

// An account's JWT signed by its operator, without connection or subscription limits. JetStream is
// on for an account only when its limits say so: `enabled` gives it unlimited memory and disk storage,
// streams and consumers.
std::string account_jwt(const NkeyPair& account, const NkeyPair& op, const std::string& name, JetStream jetstream);

// A user's JWT signed by its account (no signing keys), with `permissions`.
std::string user_jwt(const NkeyPair& user, const NkeyPair& account, const std::string& name,
                     const UserPermissions& permissions);

// The text of a .creds file (the format nsc writes and nats.c reads): the user JWT block, then the
// user's seed block.
std::string creds_text(const std::string& user_jwt, const std::string& user_seed);

}  // namespace kvidx::testing
