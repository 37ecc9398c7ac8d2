#include "tests/support/nats_jwt.h"

#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace kvidx::testing {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order nats-io/jwt writes them

std::string base64url(const unsigned char* data, std::size_t size) {
  std::string out(4 * ((size + 2) / 3) + 1, '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(size));
  out.resize(static_cast<std::size_t>(written));
  // NOTE: JWTs use the URL alphabet without padding (Go's base64.RawURLEncoding).
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

std::string base64url(const std::string& text) {
  return base64url(reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

// RFC 4648 base32 without padding (Go's base32.StdEncoding.WithPadding(NoPadding)).
std::string base32(const unsigned char* data, std::size_t size) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  std::string out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (std::size_t i = 0; i < size; ++i) {
    buffer = (buffer << 8) | data[i];
    bits += 8;
    while (bits >= 5) {
      out += kAlphabet[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (5 - bits)) & 31];
  return out;
}

// The claims' id: base32 of SHA-512/256 over the standard claims as JSON, written before "jti" is set
// (nats-io/jwt's ClaimsData.hash). The server does not check it; it keeps the JWTs like nsc's.
std::string claims_id(const Json& standard_claims) {
  const std::string text = standard_claims.dump();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha512_256(), nullptr) != 1) {
    throw std::runtime_error("SHA-512/256 failed");
  }
  return base32(digest, size);
}

// header.payload.signature, signed by `issuer` over "header.payload" (JWT v2).
std::string signed_jwt(const NkeyPair& issuer, const std::string& subject, const std::string& name, Json nats) {
  const auto now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  Json standard = {{"iat", now}, {"iss", issuer.public_key}, {"name", name}, {"sub", subject}};
  Json claims = {{"jti", claims_id(standard)}};
  claims.update(standard);
  claims["nats"] = std::move(nats);
  const std::string signed_part =
      base64url(Json{{"typ", "JWT"}, {"alg", "ed25519-nkey"}}.dump()) + "." + base64url(claims.dump());
  const auto signature = bus::nkey_sign(issuer.seed, signed_part);
  if (!signature) throw std::runtime_error("cannot sign a JWT with the seed of " + issuer.public_key);
  return signed_part + "." + base64url(signature->data(), signature->size());
}

Json rules_json(const SubjectRules& rules) {
  Json out = Json::object();
  if (!rules.allow.empty()) out["allow"] = rules.allow;
  if (!rules.deny.empty()) out["deny"] = rules.deny;
  return out;
}

}  // namespace

NkeyPair NkeyPair::generate(bus::NkeyType type) {
  NkeyPair pair{bus::new_nkey_seed(type), {}};
  auto public_key = bus::nkey_public_from_seed(pair.seed);
  if (!public_key) throw std::runtime_error("new_nkey_seed made a seed nkey_public_from_seed rejects");
  pair.public_key = std::move(*public_key);
  return pair;
}

std::string operator_jwt(const NkeyPair& op, const std::string& name, const std::string& system_account) {
  return signed_jwt(op, op.public_key, name,
                    Json{{"system_account", system_account}, {"type", "operator"}, {"version", 2}});
}

std::string account_jwt(const NkeyPair& account, const NkeyPair& op, const std::string& name, JetStream jetstream) {
  // -1: unlimited.
  Json limits = {{"subs", -1},    {"data", -1},        {"payload", -1}, {"imports", -1},
                 {"exports", -1}, {"wildcards", true}, {"conn", -1},    {"leaf", -1}};
  if (jetstream == JetStream::enabled) {
    // NOTE: the server enables JetStream for the account when mem_storage or disk_storage is not 0.
    limits.update(Json{{"mem_storage", -1}, {"disk_storage", -1}, {"streams", -1}, {"consumer", -1}});
  }
  return signed_jwt(op, account.public_key, name,
                    Json{{"limits", limits},
                         {"default_permissions", Json{{"pub", Json::object()}, {"sub", Json::object()}}},
                         {"type", "account"},
                         {"version", 2}});
}

std::string user_jwt(const NkeyPair& user, const NkeyPair& account, const std::string& name,
                     const UserPermissions& permissions) {
  return signed_jwt(account, user.public_key, name,
                    Json{{"pub", rules_json(permissions.publish)},
                         {"sub", rules_json(permissions.subscribe)},
                         {"subs", -1},
                         {"data", -1},
                         {"payload", -1},
                         {"type", "user"},
                         {"version", 2}});
}

std::string creds_text(const std::string& user_jwt, const std::string& user_seed) {
  return "-----BEGIN NATS USER JWT-----\n" + user_jwt +
         "\n------END NATS USER JWT------\n\n"
         "************************* IMPORTANT *************************\n"
         "NKEY Seed printed below can be used to sign and prove identity.\n"
         "NKEYs are sensitive and should be treated as secrets.\n\n"
         "-----BEGIN USER NKEY SEED-----\n" +
         user_seed +
         "\n------END USER NKEY SEED------\n\n"
         "*************************************************************\n";
}

}  // namespace kvidx::testing
