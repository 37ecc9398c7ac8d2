#include "apps/kvidx/nats_flags.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>

#include "apps/kvidx/exit_codes.h"
#include "libbus/nats_url.h"

namespace kvidx::cli {

std::string default_nats_url() {
  const char* env = std::getenv("NATS_URL");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(kDefaultNatsUrl);
}

CLI::Option* add_nats_option(CLI::App& cmd, std::string& url, bool bare_allowed) {
  const std::string fallback = default_nats_url();
  if (!bare_allowed) url = fallback;
  // NOTE: the default is described, not shown: $NATS_URL may hold a password.
  CLI::Option* opt = cmd.add_option(
      "--nats", url,
      fmt::format("NATS server URL (default: $NATS_URL, else {}){}", kDefaultNatsUrl,
                  bare_allowed ? "; '--nats' alone uses that default" : ""));
  if (bare_allowed) {
    // NOTE: CLI11 gives a value-less optional option its default string; map it to the URL here, so
    // the URL itself (maybe with a password from $NATS_URL) never shows in --help.
    opt->expected(0, 1)->default_str("default");
    opt->transform(CLI::Validator(
        [fallback](std::string& value) {
          if (value == "default") value = fallback;
          return std::string();
        },
        ""));
  }
  return opt;
}

int exit_code_for(const bus::BusError& error) {
  switch (error.status) {
    case NATS_NO_SERVER:
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
    case NATS_TIMEOUT:
    case NATS_NO_RESPONDERS:
      return kExitUnreachable;
    default:
      return kExitFailure;
  }
}

std::string connect_failure(const bus::BusError& error, const std::string& url) {
  // Connection::connect already names the (redacted) URL: "connect to <url>: <reason>".
  if (error.message.rfind("connect to ", 0) == 0) return "cannot " + error.message;
  return fmt::format("{}: {}", bus::redact_url(url), error.message);
}

}  // namespace kvidx::cli
