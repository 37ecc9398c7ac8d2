// kvidx nkey: makes the NATS user nkeys a secured deployment needs (deploy/make-secrets), as the
// nk tool of nats-io would, without another binary: a new seed written to a file only its owner can
// read, its public key printed (that goes into the server's config); or the public key of a seed.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/commands.h"
#include "apps/kvidx/exit_codes.h"
#include "libbus/nats_nkey.h"

namespace kvidx::cli {
namespace {

struct NkeyFlags {
  std::string out;
  std::string seed_file;
};

int run_new(const NkeyFlags& flags) {
  std::string seed = bus::new_nkey_seed(bus::NkeyType::user);
  const auto public_key = bus::nkey_public_from_seed(seed);
  // NOTE: created 0600 and never overwritten: a seed is a secret, an existing one may be in use.
  const int fd = ::open(flags.out.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "kvidx nkey: cannot create %s: %s\n", flags.out.c_str(), std::strerror(errno));
    return kExitFailure;
  }
  seed += '\n';
  const bool written = ::write(fd, seed.data(), seed.size()) == static_cast<ssize_t>(seed.size());
  std::memset(seed.data(), 0, seed.size());
  if (::close(fd) != 0 || !written || !public_key) {
    std::fprintf(stderr, "kvidx nkey: cannot write %s\n", flags.out.c_str());
    return kExitFailure;
  }
  std::printf("%s\n", public_key->c_str());
  return kExitOk;
}

int run_public(const NkeyFlags& flags) {
  bus::NkeyError error;
  auto seed = bus::read_nkey_seed_file(flags.seed_file, &error);
  auto public_key = seed ? bus::nkey_public_from_seed(*seed, &error) : std::nullopt;
  if (seed) std::memset(seed->data(), 0, seed->size());
  if (!public_key) {
    std::fprintf(stderr, "kvidx nkey: %s: %s\n", flags.seed_file.c_str(), error.message.c_str());
    return kExitFailure;
  }
  std::printf("%s\n", public_key->c_str());
  return kExitOk;
}

}  // namespace

void add_nkey_command(Command& app, int& exit_code) {
  auto flags = std::make_shared<NkeyFlags>();
  Command& cmd =
      app.add_subcommand("nkey", "Make a NATS user nkey (seed file + public key), or print a seed's public key");
  cmd.require_subcommand(1);
  Command& make = cmd.add_subcommand("new", "Write a new user seed to --out (mode 0600) and print its public key");
  make.add_option("--out", flags->out, "Seed file to create (must not exist)").required();
  make.callback([flags, &exit_code] { exit_code = run_new(*flags); });
  Command& pub = cmd.add_subcommand("public", "Print the public key (U...) of a seed file (or a .creds file)");
  pub.add_option("--seed-file", flags->seed_file, "Seed file").required().check(ExistingFile{});
  pub.callback([flags, &exit_code] { exit_code = run_public(*flags); });
  cmd.footer(
      "The public key goes into the server's authorization (see deploy/make-secrets); the seed stays with\n"
      "the client: kvidx ... --nkey FILE. Example: kvidx nkey new --out router.nk");
}

}  // namespace kvidx::cli
