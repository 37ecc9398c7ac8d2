#include "libbus/nats_nonce_signer.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "libbus/log_rate_limiter.h"
#include "libbus/nats_error.h"
#include "libbus/nats_nkey.h"

namespace kvidx::bus {
namespace {

std::atomic<std::uint64_t> g_refused_total{0};

LogRateLimiter& refusal_log_limiter() {
  static LogRateLimiter limiter;
  return limiter;
}

// A copy nats.c frees with free() (it owns what the handlers return).
char* malloc_copy(std::string_view text) {
  auto* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out == nullptr) return nullptr;
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return out;
}

// The seed of `path` (an nkey seed file or a .creds file) and its public key; the seed is wiped here.
BusResult<std::string> public_key_of(const std::string& path, const char* option) {
  NkeyError error;
  auto seed = read_nkey_seed_file(path, &error);
  std::optional<std::string> public_key;
  if (seed) public_key = nkey_public_from_seed(*seed, &error);
  if (seed) OPENSSL_cleanse(seed->data(), seed->size());
  if (!public_key) return BusError{NATS_INVALID_ARG, std::string(option) + " " + path + ": " + error.message};
  return std::string(std::move(*public_key));
}

}  // namespace

BusResult<std::string> read_creds_user_jwt(const std::string& path) {
  std::ifstream in(path);
  if (!in) return BusError{NATS_INVALID_ARG, "--creds " + path + ": cannot read the file"};
  std::string line;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find("BEGIN NATS USER JWT") != std::string::npos) {
      in_block = true;
      continue;
    }
    if (!in_block) continue;
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    if (line.find("END NATS USER JWT") != std::string::npos) break;
    const auto end = line.find_last_not_of(" \t");
    return line.substr(start, end - start + 1);
  }
  return BusError{NATS_INVALID_ARG, "--creds " + path + ": no user JWT (no \"BEGIN NATS USER JWT\" block)"};
}

BusResult<std::unique_ptr<NonceSigner>> NonceSigner::for_creds(const std::string& path) {
  if (auto jwt = read_creds_user_jwt(path); !jwt) return jwt.error();
  auto public_key = public_key_of(path, "--creds");
  if (!public_key) return public_key.error();
  return std::unique_ptr<NonceSigner>(new NonceSigner(path, true, std::move(public_key).value()));
}

BusResult<std::unique_ptr<NonceSigner>> NonceSigner::for_nkey(const std::string& path) {
  auto public_key = public_key_of(path, "--nkey");
  if (!public_key) return public_key.error();
  return std::unique_ptr<NonceSigner>(new NonceSigner(path, false, std::move(public_key).value()));
}

BusStatus NonceSigner::install(natsOptions* opts) {
  const natsStatus s = creds_ ? natsOptions_SetUserCredentialsCallbacks(opts, on_user_jwt, this, on_sign, this)
                              : natsOptions_SetNKey(opts, public_key_.c_str(), on_sign, this);
  if (s != NATS_OK) return nats_error(s, (creds_ ? "credentials file " : "nkey seed file ") + path_);
  return {};
}

bool NonceSigner::libnats_drops_leading_zero() { return nats_GetVersionNumber() < 0x030A00; }

std::uint64_t NonceSigner::refused_total() { return g_refused_total.load(); }

BusResult<std::string> NonceSigner::sign(std::string_view nonce) {
  NkeyError error;
  auto seed = read_nkey_seed_file(path_, &error);
  if (!seed) return BusError{NATS_ERR, (creds_ ? "--creds " : "--nkey ") + path_ + ": " + error.message};
  auto signature = nkey_sign(*seed, nonce);
  OPENSSL_cleanse(seed->data(), seed->size());
  if (!signature) return BusError{NATS_ERR, (creds_ ? "--creds " : "--nkey ") + path_ + ": not a valid nkey seed"};
  // NOTE: the invariant of this class: never hand libnats < 3.10 a signature it would drop (see
  // the header). A refusal costs one connect; a dropped signature costs a confusing auth failure.
  if ((*signature)[0] == 0 && libnats_drops_leading_zero()) {
    refused_since_.fetch_add(1);
    const std::uint64_t total = g_refused_total.fetch_add(1) + 1;
    if (const auto verdict = refusal_log_limiter().admit("nonce-signature"); verdict.log) {
      spdlog::info(
          "NATS: this nonce's signature starts with a zero byte, which libnats {} cannot send (nats.c#705); "
          "connecting again for a new nonce ({} so far){}",
          nats_GetVersion(), total, suppressed_note(verdict));
    }
    return BusError{NATS_ERR, "the nonce signature starts with a zero byte, which libnats " +
                                  std::string(nats_GetVersion()) +
                                  " cannot send (nats.c#705); a new connection gets a new nonce"};
  }
  return std::string(reinterpret_cast<const char*>(signature->data()), signature->size());
}

natsStatus NonceSigner::on_user_jwt(char** user_jwt, char** error_text, void* closure) {
  auto* self = static_cast<NonceSigner*>(closure);
  auto jwt = read_creds_user_jwt(self->path_);
  if (!jwt) {
    *error_text = malloc_copy(jwt.error().message);
    return NATS_ERR;
  }
  *user_jwt = malloc_copy(jwt.value());
  return *user_jwt != nullptr ? NATS_OK : NATS_NO_MEMORY;
}

natsStatus NonceSigner::on_sign(char** error_text, unsigned char** signature, int* signature_length, const char* nonce,
                                void* closure) {
  auto* self = static_cast<NonceSigner*>(closure);
  auto signed_nonce = self->sign(nonce != nullptr ? nonce : "");
  if (!signed_nonce) {
    *error_text = malloc_copy(signed_nonce.error().message);
    return NATS_ERR;
  }
  *signature = reinterpret_cast<unsigned char*>(malloc_copy(signed_nonce.value()));
  if (*signature == nullptr) return NATS_NO_MEMORY;
  *signature_length = static_cast<int>(signed_nonce.value().size());
  return NATS_OK;
}

}  // namespace kvidx::bus
