#include "apps/kvidx/nats_flags.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "apps/kvidx/cli_command.h"
#include "apps/kvidx/exit_codes.h"
#include "libbus/nats_context.h"
#include "libbus/nats_url.h"

namespace kvidx::cli {
namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// The first line of a secret file, without its line end; nullopt when it cannot be read.
std::optional<std::string> read_secret_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  return line;
}

// flag (or config key) > environment variable > context > nothing.
void pick(std::string& out, const std::string& flag, const char* env_name, const std::string& from_context) {
  if (!flag.empty())
    out = flag;
  else if (auto e = env(env_name))
    out = *e;
  else
    out = from_context;
}

// Options whose value is a secret: their values are wiped from argv.
constexpr const char* kSecretOptions[] = {"--password", "--token"};

// In place, in each comma-separated URL: "nats://user:secret@host" -> "nats://user:******@host",
// "nats://token@host" -> "nats://*****@host".
void mask_url_credentials(char* urls) {
  for (char* url = urls; url != nullptr && *url != '\0';) {
    char* end = std::strchr(url, ',');
    char* const stop = end != nullptr ? end : url + std::strlen(url);
    char* scheme = std::strstr(url, "://");
    if (scheme != nullptr && scheme < stop) {
      char* const info = scheme + 3;
      char* at = nullptr;
      for (char* p = info; p < stop && *p != '/'; ++p) {
        if (*p == '@') at = p;
      }
      if (at != nullptr) {
        char* colon = static_cast<char*>(std::memchr(info, ':', static_cast<std::size_t>(at - info)));
        char* const from = colon != nullptr ? colon + 1 : info;
        std::memset(from, '*', static_cast<std::size_t>(at - from));
      }
    }
    url = end != nullptr ? end + 1 : nullptr;
  }
}

}  // namespace

std::string default_nats_url() { return env("NATS_URL").value_or(kDefaultNatsUrl); }

Option& add_nats_options(Command& cmd, NatsFlags& flags, bool bare_allowed) {
  // NOTE: defaults are described, never shown: $NATS_URL and the rest may hold secrets.
  Option& opt = cmd.add_option(
      "--nats", flags.url,
      fmt::format("NATS server URL, or several comma-separated (default: $NATS_URL, else {}; a --context's URL comes "
                  "before that last default){}",
                  kDefaultNatsUrl, bare_allowed ? "; '--nats' alone uses that default" : ""));
  if (bare_allowed) opt.expected(0, 1).default_str("default");
  OptionGroup group = cmd.add_option_group("NATS authentication and TLS (as the nats CLI)");
  group.add_option("--context", flags.context,
                   "nats CLI context: NAME (~/.config/nats/context/NAME.json) or a .json path ($NATS_CONTEXT)");
  group.add_option("--creds", flags.auth.creds_file, "User credentials file: JWT and nkey seed ($NATS_CREDS)");
  group.add_option("--nkey", flags.auth.nkey_seed_file, "User nkey seed file ($NATS_NKEY)");
  group.add_option("--user", flags.auth.user, "User name ($NATS_USER)");
  group.add_option("--password", flags.auth.password,
                   "Password ($NATS_PASSWORD; prefer --password-file or the variable: argv is visible to ps)");
  group.add_option("--password-file", flags.password_file, "File whose first line is the password");
  group.add_option("--token", flags.auth.token, "Authentication token ($NATS_TOKEN; prefer --token-file)");
  group.add_option("--token-file", flags.token_file, "File whose first line is the token");
  group.add_option("--tlscert", flags.auth.tls_cert, "TLS client certificate, for mutual TLS ($NATS_CERT)");
  group.add_option("--tlskey", flags.auth.tls_key, "TLS client private key ($NATS_KEY)");
  group.add_option("--tlsca", flags.auth.tls_ca, "CA certificates that sign the server's certificate ($NATS_CA)");
  group.add_flag("--tlsfirst", flags.auth.tls_first,
                 "TLS handshake before the server's INFO (not supported by libnats 3.4.1: refused)");
  group.add_option("--inbox-prefix", flags.auth.inbox_prefix,
                   "Prefix of reply subjects instead of _INBOX, for subject permissions ($NATS_INBOX_PREFIX)");
  return opt;
}

int resolve_nats(const NatsFlags& flags, bus::ConnectionOptions& options, std::string& error, bool read_files) {
  bus::NatsContext context;
  const std::string context_name = !flags.context.empty() ? flags.context : env("NATS_CONTEXT").value_or("");
  if (!context_name.empty()) {
    auto loaded = bus::load_nats_context(context_name, error);
    if (!loaded) return kExitFailure;
    context = std::move(*loaded);
  }
  const bool url_given = !flags.url.empty() && flags.url != "default";
  if (url_given)
    options.url = flags.url;
  else if (auto e = env("NATS_URL"))
    options.url = *e;
  else if (!context.url.empty())
    options.url = context.url;
  else
    options.url = kDefaultNatsUrl;

  // Flags and the environment first; the context fills only what they left empty, and its way to
  // authenticate is used only when they name none.
  bus::NatsAuth& auth = options.auth;
  const bus::NatsAuth none;
  pick(auth.creds_file, flags.auth.creds_file, "NATS_CREDS", none.creds_file);
  pick(auth.nkey_seed_file, flags.auth.nkey_seed_file, "NATS_NKEY", none.nkey_seed_file);
  pick(auth.user, flags.auth.user, "NATS_USER", none.user);
  pick(auth.password, flags.auth.password, "NATS_PASSWORD", none.password);
  pick(auth.token, flags.auth.token, "NATS_TOKEN", none.token);
  if (!flags.password_file.empty()) {
    auto secret = read_files ? read_secret_file(flags.password_file) : std::optional<std::string>("(from a file)");
    if (!secret) {
      error = "cannot read --password-file " + flags.password_file;
      return kExitFailure;
    }
    auth.password = std::move(*secret);
  }
  if (!flags.token_file.empty()) {
    auto secret = read_files ? read_secret_file(flags.token_file) : std::optional<std::string>("(from a file)");
    if (!secret) {
      error = "cannot read --token-file " + flags.token_file;
      return kExitFailure;
    }
    auth.token = std::move(*secret);
  }
  const bool named = !auth.creds_file.empty() || !auth.nkey_seed_file.empty() || !auth.user.empty() ||
                     !auth.password.empty() || !auth.token.empty();
  if (!named) {
    auth.creds_file = context.auth.creds_file;
    auth.nkey_seed_file = context.auth.nkey_seed_file;
    auth.user = context.auth.user;
    auth.password = context.auth.password;
    auth.token = context.auth.token;
  }
  pick(auth.tls_cert, flags.auth.tls_cert, "NATS_CERT", context.auth.tls_cert);
  pick(auth.tls_key, flags.auth.tls_key, "NATS_KEY", context.auth.tls_key);
  pick(auth.tls_ca, flags.auth.tls_ca, "NATS_CA", context.auth.tls_ca);
  pick(auth.inbox_prefix, flags.auth.inbox_prefix, "NATS_INBOX_PREFIX", context.auth.inbox_prefix);
  auth.tls_first = flags.auth.tls_first || context.auth.tls_first;

  // Usage errors: what cannot work whatever the server says.
  if (auth.tls_first) {
    error =
        "--tlsfirst: a TLS handshake before the server's INFO is not supported by the NATS client library "
        "kvidx uses (libnats 3.4.1); use the server's default TLS upgrade";
    return kExitUsage;
  }
  const int methods = (auth.creds_file.empty() ? 0 : 1) + (auth.nkey_seed_file.empty() ? 0 : 1) +
                      (auth.token.empty() ? 0 : 1) + (auth.user.empty() && auth.password.empty() ? 0 : 1);
  if (methods > 1) {
    error = "give one way to authenticate: --creds, --nkey, --token or --user with --password";
    return kExitUsage;
  }
  if (!auth.password.empty() && auth.user.empty()) {
    error = "a password needs a user (--user or $NATS_USER)";
    return kExitUsage;
  }
  if (auth.tls_cert.empty() != auth.tls_key.empty()) {
    error = "a TLS client certificate needs its key: give both --tlscert and --tlskey";
    return kExitUsage;
  }
  // Files named by the options must exist: a missing one is exit 1 like every missing input.
  for (const auto& [what, path] : {std::pair{"--creds", auth.creds_file}, std::pair{"--nkey", auth.nkey_seed_file},
                                   std::pair{"--tlscert", auth.tls_cert}, std::pair{"--tlskey", auth.tls_key},
                                   std::pair{"--tlsca", auth.tls_ca}}) {
    if (read_files && !path.empty() && !std::ifstream(path)) {
      error = fmt::format("cannot read {} {}", what, path);
      return kExitFailure;
    }
  }
  return kExitOk;
}

std::vector<std::string> scrub_secret_arguments(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (int i = 1; i < argc; ++i) {
    for (const char* option : kSecretOptions) {
      const std::size_t n = std::strlen(option);
      char* value = nullptr;
      if (std::strcmp(argv[i], option) == 0 && i + 1 < argc)
        value = argv[i + 1];
      else if (std::strncmp(argv[i], option, n) == 0 && argv[i][n] == '=')
        value = argv[i] + n + 1;
      // NOTE: overwritten in place: /proc/<pid>/cmdline (what ps reads) is this very memory.
      if (value != nullptr) std::memset(value, '*', std::strlen(value));
    }
    if (std::strcmp(argv[i], "--nats") == 0 && i + 1 < argc)
      mask_url_credentials(argv[i + 1]);
    else if (std::strncmp(argv[i], "--nats=", 7) == 0)
      mask_url_credentials(argv[i] + 7);
  }
  return args;
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
    case NATS_SSL_ERROR:
    case NATS_SECURE_CONNECTION_WANTED:
    case NATS_SECURE_CONNECTION_REQUIRED: return kExitUnreachable;
    default: return kExitFailure;
  }
}

std::string connect_failure(const bus::BusError& error, const std::string& url) {
  // Connection::connect already names the (redacted) URL: "connect to <url>: <reason>".
  if (error.message.rfind("connect to ", 0) == 0) return "cannot " + error.message;
  return fmt::format("{}: {}", bus::redact_url(url), error.message);
}

bool refused_by_server(const bus::Connection& connection) {
  return connection.last_error().status == NATS_NOT_PERMITTED;
}

std::string explain_refusal(const bus::Connection& connection) {
  const std::string text = connection.last_error().message;
  const bool subscription = text.find("Subscription") != std::string::npos;
  return "the server refused: " + text +
         (subscription ? " (replies come to the inbox prefix: give --inbox-prefix as this user's subscribe permission "
                         "allows)"
                       : " (this user's permissions do not allow it)");
}

}  // namespace kvidx::cli
