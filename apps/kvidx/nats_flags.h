// What every kvidx subcommand that talks to NATS shares: the nats CLI's connection options
// (--nats, --context, --creds, --nkey, --user/--password, --token, --tlscert/--tlskey/--tlsca,
// --tlsfirst, --inbox-prefix), their environment variables and config-file keys, one way to turn
// them into connection options, and one exit code and one message for a server that cannot be
// reached or refuses the connection.
//
// Precedence: a flag (or config-file key), then its environment variable (NATS_URL, NATS_USER,
// NATS_PASSWORD, NATS_TOKEN, NATS_CREDS, NATS_NKEY, NATS_CERT, NATS_KEY, NATS_CA, NATS_CONTEXT,
// NATS_INBOX_PREFIX), then the nats CLI context, then the default URL nats://127.0.0.1:4222.
// Secrets are best given in files (--password-file, --token-file, --creds, --nkey) or the
// environment: a --password or --token value on the command line is wiped from the process's
// argument list at start (see scrub_secret_arguments), but a shell history still has it.
#pragma once

#include <string>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"

namespace kvidx::cli {

class Command;
struct Option;

inline constexpr const char* kDefaultNatsUrl = "nats://127.0.0.1:4222";

struct NatsFlags {
  std::string url;  // empty or "default": not given (dump/stats: empty means offline mode)
  std::string context;
  bus::NatsAuth auth;
  std::string password_file;
  std::string token_file;
};

// $NATS_URL when set and not empty, else nats://127.0.0.1:4222.
std::string default_nats_url();

// Adds --nats and every authentication / TLS option. `bare_allowed` (dump and stats): --nats picks
// the live mode over --events, so `url` stays empty unless given; '--nats' alone means the default.
Option& add_nats_options(Command& cmd, NatsFlags& flags, bool bare_allowed = false);

// Fills `options.url` and `options.auth` from the flags, the environment and the context file.
// kExitOk, or the exit code with a one-line `error`: 1 for a file that cannot be read (or an
// unknown context), 2 for options that cannot work together (--tlsfirst, two ways to authenticate,
// a certificate without its key).
// `read_files` false (serve --check-config on a machine without the secrets): files are named, not
// opened, and a --password-file/--token-file counts as "set".
int resolve_nats(const NatsFlags& flags, bus::ConnectionOptions& options, std::string& error, bool read_files = true);

// Overwrites, in place, the values of --password and --token and the credentials inside --nats URLs
// in argv (so `ps` and /proc/<pid>/cmdline no longer show them) and returns the arguments as they
// were, for parsing.
std::vector<std::string> scrub_secret_arguments(int argc, char** argv);

// 4 (kExitUnreachable) when `error` says the server is down, refused us (authentication,
// authorization, TLS) or did not answer in time; 1 (kExitFailure) otherwise.
int exit_code_for(const bus::BusError& error);

// One line for a failure talking to the server at `url`, credentials hidden: "cannot connect to
// nats://***@127.0.0.1:4222: Authentication Violation (...)" for a failed connect, else
// "<url>: <what failed>".
std::string connect_failure(const bus::BusError& error, const std::string& url);

// True when the server refused something the connection sent or subscribed to (a permissions
// violation, NATS_NOT_PERMITTED); `explain_refusal` turns the server's text into one line with a hint:
// "the server refused: Permissions Violation for Publish to \"kv.admin.remove_worker\" (...)".
bool refused_by_server(const bus::Connection& connection);
std::string explain_refusal(const bus::Connection& connection);

}  // namespace kvidx::cli
