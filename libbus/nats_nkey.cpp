#include "libbus/nats_nkey.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

namespace kvidx::bus {
namespace {

constexpr std::uint8_t kSeedPrefix = 18 << 3;  // 'S'
constexpr char kBase32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

// CRC-16/XMODEM (polynomial 0x1021, initial value 0), stored little-endian after the payload.
std::uint16_t crc16(const std::uint8_t* data, std::size_t size) {
  std::uint16_t crc = 0;
  for (std::size_t i = 0; i < size; ++i) {
    crc ^= static_cast<std::uint16_t>(data[i]) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc =
          (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021) : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::string base32_encode(const std::vector<std::uint8_t>& in) {
  std::string out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (std::uint8_t byte : in) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += kBase32[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += kBase32[(buffer << (5 - bits)) & 31];
  return out;
}

std::optional<std::vector<std::uint8_t>> base32_decode(std::string_view in) {
  std::vector<std::uint8_t> out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= '2' && c <= '7')
      v = c - '2' + 26;
    else
      return std::nullopt;
    buffer = (buffer << 5) | static_cast<std::uint32_t>(v);
    bits += 5;
    if (bits >= 8) {
      out.push_back(static_cast<std::uint8_t>(buffer >> (bits - 8)));
      bits -= 8;
    }
  }
  return out;
}

// Payload + CRC16 (little-endian), base32.
std::string encode_with_crc(std::vector<std::uint8_t> raw) {
  const std::uint16_t crc = crc16(raw.data(), raw.size());
  raw.push_back(static_cast<std::uint8_t>(crc & 0xff));
  raw.push_back(static_cast<std::uint8_t>(crc >> 8));
  std::string out = base32_encode(raw);
  OPENSSL_cleanse(raw.data(), raw.size());
  return out;
}

struct DecodedSeed {
  std::uint8_t type = 0;
  std::array<std::uint8_t, 32> key{};
  ~DecodedSeed() { OPENSSL_cleanse(key.data(), key.size()); }
};

bool decode_seed(std::string_view seed, DecodedSeed& out, NkeyError* error) {
  auto fail = [&](const char* why) {
    if (error) error->message = why;
    return false;
  };
  auto raw = base32_decode(seed);
  if (!raw || raw->size() != 2 + 32 + 2)
    return fail("not an nkey seed (expected 58 base32 characters starting with 'S')");
  const std::uint16_t crc = static_cast<std::uint16_t>((*raw)[34] | ((*raw)[35] << 8));
  const bool crc_ok = crc16(raw->data(), 34) == crc;
  const std::uint8_t b0 = (*raw)[0];
  const std::uint8_t b1 = (*raw)[1];
  out.type = static_cast<std::uint8_t>(((b0 & 7) << 5) | ((b1 & 0xf8) >> 3));
  std::copy(raw->begin() + 2, raw->begin() + 34, out.key.begin());
  const bool prefix_ok = (b0 & 0xf8) == kSeedPrefix;
  OPENSSL_cleanse(raw->data(), raw->size());
  if (!crc_ok) return fail("nkey seed checksum mismatch");
  if (!prefix_ok) return fail("not an nkey seed (expected 'S' prefix)");
  return true;
}

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

PkeyPtr private_key(const DecodedSeed& seed) {
  return PkeyPtr(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.key.data(), seed.key.size()),
                 &EVP_PKEY_free);
}

}  // namespace

std::optional<std::string> nkey_public_from_seed(std::string_view seed, NkeyError* error) {
  DecodedSeed decoded;
  if (!decode_seed(seed, decoded, error)) return std::nullopt;
  PkeyPtr key = private_key(decoded);
  std::vector<std::uint8_t> raw(1 + 32);
  std::size_t length = 32;
  if (!key || EVP_PKEY_get_raw_public_key(key.get(), raw.data() + 1, &length) != 1 || length != 32) {
    if (error) error->message = "cannot derive the public key of the nkey seed";
    return std::nullopt;
  }
  raw[0] = decoded.type;
  return encode_with_crc(std::move(raw));
}

std::optional<std::string> read_nkey_seed_file(const std::string& path, NkeyError* error) {
  std::ifstream in(path);
  if (!in) {
    if (error) error->message = "cannot read nkey seed file " + path;
    return std::nullopt;
  }
  std::string line;
  // NOTE: a seed file holds the seed alone on a line; a .creds file holds it inside a block, also
  // alone on its line. Only the token's shape is checked here, the seed itself by decode_seed.
  while (std::getline(in, line)) {
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos) continue;
    const auto end = line.find_last_not_of(" \t\r");
    std::string token = line.substr(start, end - start + 1);
    OPENSSL_cleanse(line.data(), line.size());
    if (token.size() == 58 && token[0] == 'S') return token;
    OPENSSL_cleanse(token.data(), token.size());
  }
  if (error) error->message = "no nkey seed found in " + path;
  return std::nullopt;
}

std::string new_nkey_seed(NkeyType type) {
  std::vector<std::uint8_t> raw(2 + 32);
  const auto prefix = static_cast<std::uint8_t>(type);
  raw[0] = static_cast<std::uint8_t>(kSeedPrefix | (prefix >> 5));
  raw[1] = static_cast<std::uint8_t>((prefix & 31) << 3);
  RAND_bytes(raw.data() + 2, 32);
  return encode_with_crc(std::move(raw));
}

std::optional<std::array<std::uint8_t, 64>> nkey_sign(std::string_view seed, std::string_view data) {
  DecodedSeed decoded;
  if (!decode_seed(seed, decoded, nullptr)) return std::nullopt;
  PkeyPtr key = private_key(decoded);
  if (!key) return std::nullopt;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::array<std::uint8_t, 64> sig{};
  std::size_t sig_len = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &sig_len, reinterpret_cast<const unsigned char*>(data.data()),
                     data.size()) != 1) {
    return std::nullopt;
  }
  return sig;
}

}  // namespace kvidx::bus
