// Signs the server's nonce for --nkey and --creds with kvidx's own Ed25519 (libbus/nats_nkey.h),
// and hands nats.c the user JWT of a .creds file. The seed is read from its file at every (re)connect,
// as nats.c does (a rotated file is picked up), held only while signing, then wiped.
//
// Why not nats.c's own handlers: libnats before 3.10 (Debian 12 ships 3.4.1) base64-encodes the
// signature with a function that stops at a leading zero byte (nats-io/nats.c#705, fixed in 3.10.0).
// For 1 nonce in 256 the signature starts with 0, the CONNECT goes out without one and the server
// answers "Authorization Violation": `kvidx serve` exited 4 at startup about once in 60 starts. Here
// such a signature is refused with its own error and counted; Connection::connect connects again
// (a new connection gets a new nonce) and nats.c's reconnect loop retries on its own.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "libbus/bus_error.h"

namespace kvidx::bus {

class NonceSigner {
 public:
  // For a .creds file (user JWT + seed) or an nkey seed file; checks the file now (readable, a seed
  // that decodes, a JWT for .creds) so a bad file is one clear error before any connect.
  static BusResult<std::unique_ptr<NonceSigner>> for_creds(const std::string& path);
  static BusResult<std::unique_ptr<NonceSigner>> for_nkey(const std::string& path);

  // Installs the handlers on `opts`; `this` must outlive every connection made with them.
  BusStatus install(natsOptions* opts);

  // The raw signature nats.c would send for `nonce`, or an error (unreadable seed; a signature this
  // libnats cannot send). What the signature handler does, callable by tests.
  BusResult<std::string> sign(std::string_view nonce);

  // Signatures refused because this libnats would drop them, since the last call (resets).
  std::uint64_t take_refused() { return refused_since_.exchange(0); }
  // Since this process started, every signer (for logs and tests).
  static std::uint64_t refused_total();

  // True when the linked libnats has the leading-zero bug (version below 3.10.0).
  static bool libnats_drops_leading_zero();

 private:
  NonceSigner(std::string path, bool creds, std::string public_key)
      : path_(std::move(path)), creds_(creds), public_key_(std::move(public_key)) {}

  static natsStatus on_user_jwt(char** user_jwt, char** error_text, void* closure);
  static natsStatus on_sign(char** error_text, unsigned char** signature, int* signature_length, const char* nonce,
                            void* closure);

  const std::string path_;
  const bool creds_;              // a .creds file (JWT + seed) rather than a bare seed file
  const std::string public_key_;  // of the seed ("U..."): what natsOptions_SetNKey sends
  std::atomic<std::uint64_t> refused_since_{0};
};

// The user JWT of a .creds file (the line inside "-----BEGIN NATS USER JWT-----" ... "------END").
BusResult<std::string> read_creds_user_jwt(const std::string& path);

}  // namespace kvidx::bus
