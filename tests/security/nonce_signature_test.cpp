// The nonce signature of --nkey and --creds (libbus/nats_nonce_signer.h). libnats 3.4.1 drops a
// signature whose first byte is 0 (nats-io/nats.c#705): one connect in 256 was refused with
// "Authorization Violation". The signer signs like nats.c, refuses such a signature, and a connect
// that met one connects again. Checked byte for byte against nats.c's own nats_Sign, and by many
// real connects to real servers (nkey and operator-mode .creds).
#include <doctest/doctest.h>

#include <nats/nats.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "libbus/nats_connection.h"
#include "libbus/nats_nonce_signer.h"
#include "tests/security/security_support.h"
#include "tests/support/nats_jwt.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

// nats.c's own signature of `nonce` with `seed` (raw bytes).
std::string libnats_signature(const std::string& seed, const std::string& nonce) {
  REQUIRE(nats_Open(-1) == NATS_OK);  // nats_Sign decodes with tables nats_Open fills
  unsigned char* signature = nullptr;
  int length = 0;
  REQUIRE(nats_Sign(seed.c_str(), nonce.c_str(), &signature, &length) == NATS_OK);
  std::string out(reinterpret_cast<const char*>(signature), static_cast<std::size_t>(length));
  std::free(signature);
  return out;
}

// `connects` connections with `auth` to `url`, each closed again; how many failed (first error in `first_error`).
int failed_connects(const std::string& url, const bus::NatsAuth& auth, int connects, std::string& first_error) {
  int failed = 0;
  for (int i = 0; i < connects; ++i) {
    bus::ConnectionOptions options;
    options.url = url;
    options.auth = auth;
    options.name = "nonce-signature-test";
    options.log_async_errors = false;
    auto connection = bus::Connection::connect(options);
    if (!connection) {
      if (failed++ == 0) first_error = connection.error().message;
    }
  }
  return failed;
}

}  // namespace

TEST_SUITE("security") {

TEST_CASE("the nonce signer signs like nats.c, and refuses the signatures libnats before 3.10 would drop") {
  TempDir dir;
  // A test key (never used elsewhere) chosen so that 7 of the nonces below sign to a leading 0 byte
  // (about 1 nonce in 256 does): the check is the same at every run.
  const std::string seed = "SUAOSUTFB2E3RBD7PV4CC2WL2AGRKUBKL64E7FW2YU3DQPNO4TTH36TRFA";
  auto signer = bus::NonceSigner::for_nkey(write_file(dir, "user.nk", seed));
  REQUIRE(signer.ok());
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string nonce = "nonce-" + std::to_string(i);
    auto mine = signer.value()->sign(nonce);
    if (!mine.ok()) {
      CAPTURE(nonce);
      CHECK(bus::NonceSigner::libnats_drops_leading_zero());
      CHECK_MESSAGE(mine.error().message.find("nats.c#705") != std::string::npos, mine.error().message);
      CHECK(mine.error().message.find(seed) == std::string::npos);
      CHECK(signer.value()->take_refused() == 1);
      // Refused exactly when nats.c's own signature starts with the byte its encoder stops at.
      CHECK(libnats_signature(seed, nonce)[0] == '\0');
      ++refused;
      continue;
    }
    // nats_Sign is slow (its own Ed25519, ~4 ms): compare the first 150 byte for byte.
    if (i < 150) CHECK(mine.value() == libnats_signature(seed, nonce));
    CHECK(mine.value()[0] != '\0');
  }
  CHECK(refused == (bus::NonceSigner::libnats_drops_leading_zero() ? 7 : 0));
  CHECK(signer.value()->take_refused() == 0);
}

TEST_CASE("a .creds file gives its user JWT, and a file without one or without a seed is one clear error") {
  TempDir dir;
  const NkeyPair account = NkeyPair::generate(bus::NkeyType::account);
  const NkeyPair user = NkeyPair::generate(bus::NkeyType::user);
  const std::string jwt = user_jwt(user, account, "u", {});
  std::string text = creds_text(jwt, user.seed);
  auto jwt_read = bus::read_creds_user_jwt(write_file(dir, "u.creds", text));
  REQUIRE(jwt_read.ok());
  CHECK(jwt_read.value() == jwt);
  // Written on Windows (CRLF lines): the same JWT.
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  auto jwt_crlf = bus::read_creds_user_jwt(write_file(dir, "crlf.creds", crlf));
  REQUIRE(jwt_crlf.ok());
  CHECK(jwt_crlf.value() == jwt);
  CHECK(bus::NonceSigner::for_creds(dir.file("crlf.creds")).ok());

  auto no_jwt = bus::NonceSigner::for_creds(write_file(dir, "seed-only.creds", user.seed));
  REQUIRE_FALSE(no_jwt.ok());
  CHECK_MESSAGE(no_jwt.error().message.find("no user JWT") != std::string::npos, no_jwt.error().message);
  const std::string jwt_only = text.substr(0, text.find("-----BEGIN USER NKEY SEED"));
  auto no_seed = bus::NonceSigner::for_creds(write_file(dir, "jwt-only.creds", jwt_only));
  REQUIRE_FALSE(no_seed.ok());
  CHECK_MESSAGE(no_seed.error().message.find("jwt-only.creds") != std::string::npos, no_seed.error().message);
  auto missing = bus::NonceSigner::for_creds(dir.file("missing.creds"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("cannot read") != std::string::npos);
}

TEST_CASE("1500 connects with an nkey seed all authenticate (libnats 3.4.1 alone failed ~1 in 256)") {
  TempDir dir;
  const std::string seed = bus::new_nkey_seed(bus::NkeyType::user);
  const auto public_key = bus::nkey_public_from_seed(seed);
  REQUIRE(public_key.has_value());
  NatsServer server(server_with_config(dir, "authorization { users = [ { nkey: " + *public_key + " } ] }\n"));
  bus::NatsAuth auth;
  auth.nkey_seed_file = write_file(dir, "user.nk", seed);
  const std::uint64_t refused_before = bus::NonceSigner::refused_total();
  std::string first_error;
  // With nats.c's signer, P(no failure in 1500) = (255/256)^1500 ≈ 0.3%.
  CHECK_MESSAGE(failed_connects(server.url(), auth, 1500, first_error) == 0, first_error);
  MESSAGE("signatures refused and connected again: " << bus::NonceSigner::refused_total() - refused_before);
}

TEST_CASE("600 connects with a .creds user of an operator-mode server all authenticate") {
  TempDir dir;
  const NkeyPair op = NkeyPair::generate(bus::NkeyType::operator_key);
  const NkeyPair system = NkeyPair::generate(bus::NkeyType::account);
  const NkeyPair account = NkeyPair::generate(bus::NkeyType::account);
  const std::string operator_file = write_file(dir, "operator.jwt", operator_jwt(op, "op", system.public_key));
  NatsServer server(
      server_with_config(dir, "operator: \"" + operator_file + "\"\nsystem_account: " + system.public_key +
                                  "\nresolver: MEMORY\nresolver_preload: {\n  " + system.public_key + ": \"" +
                                  account_jwt(system, op, "SYS", JetStream::disabled) + "\"\n  " + account.public_key +
                                  ": \"" + account_jwt(account, op, "KVIDX", JetStream::disabled) + "\"\n}\n"));
  const NkeyPair user = NkeyPair::generate(bus::NkeyType::user);
  bus::NatsAuth auth;
  auth.creds_file = write_file(dir, "user.creds", creds_text(user_jwt(user, account, "u", {}), user.seed));
  std::string first_error;
  // With nats.c's signer, P(no failure in 600) = (255/256)^600 ≈ 9%.
  CHECK_MESSAGE(failed_connects(server.url(), auth, 600, first_error) == 0, first_error);
}

}  // TEST_SUITE("security")
