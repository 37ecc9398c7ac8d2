// What every kvidx subcommand that talks to NATS shares: the --nats flag with one default, and
// one exit code and one message for a server that cannot be reached or refuses the connection.
#pragma once

#include <string>

#include "libbus/nats_error.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace kvidx::cli {

inline constexpr const char* kDefaultNatsUrl = "nats://127.0.0.1:4222";

// $NATS_URL when set and not empty, else nats://127.0.0.1:4222. Credentials belong there
// (nats://user:password@host:port) rather than on the command line, where `ps` shows them.
std::string default_nats_url();

// --nats URL, defaulting to default_nats_url() (resolved when the flag is added).
// `bare_allowed`: `--nats` without a value also means the default (dump and stats, where the flag
// picks the live mode over --events).
CLI::Option* add_nats_option(CLI::App& cmd, std::string& url, bool bare_allowed = false);

// 4 (kExitUnreachable) when `error` says the server is down, refused us (authentication or
// authorization) or did not answer in time; 1 (kExitFailure) otherwise.
int exit_code_for(const bus::BusError& error);

// One line for a failure talking to the server at `url`, credentials hidden: "cannot connect to
// nats://***@127.0.0.1:4222: Authentication Violation (...)" for a failed connect, else
// "<url>: <what failed>".
std::string connect_failure(const bus::BusError& error, const std::string& url);

}  // namespace kvidx::cli
