// NATS nkeys: Ed25519 keys written as base32 text with a type prefix and a CRC16 (the format of
// nats-io/nkeys: a user public key reads "U...", a user seed "SU..."). kvidx needs the public key
// of a user seed file for nats.c's natsOptions_SetNKeyFromSeed (the nats CLI's --nkey takes only
// the seed), and the tests make keys of their own. Ed25519 comes from OpenSSL (already linked by
// nats.c). Seeds are secrets: they are never logged, and buffers holding them are wiped.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvidx::bus {

enum class NkeyType : std::uint8_t {
  operator_key = 14 << 3,  // 'O'
  account = 0,             // 'A'
  user = 20 << 3,          // 'U'
  server = 13 << 3,        // 'N'
};

struct NkeyError {
  std::string message;  // never contains key material
};

// The public key ("U...") of an encoded seed ("SU..."); an error when it is not a valid seed.
std::optional<std::string> nkey_public_from_seed(std::string_view seed, NkeyError* error = nullptr);

// Reads the first seed in a file (an nkey seed file, or a .creds file's seed block).
std::optional<std::string> read_nkey_seed_file(const std::string& path, NkeyError* error = nullptr);

// A new random seed of `type`, encoded ("S" + type letter + ...).
std::string new_nkey_seed(NkeyType type);

// Ed25519 signature of `data` with the key of `seed` (raw 64 bytes); nullopt for a bad seed.
std::optional<std::array<std::uint8_t, 64>> nkey_sign(std::string_view seed, std::string_view data);

}  // namespace kvidx::bus
