// A nats CLI context (`nats context save NAME ...`): a JSON file of connection settings, read so
// kvidx connects the way `nats --context NAME` does. NAME is looked up as
// $XDG_CONFIG_HOME/nats/context/NAME.json (default ~/.config/nats/context/NAME.json); a NAME with a
// '/' or ending in .json is a path. Fields read: url, user, password, token, creds, nkey, cert,
// key, ca, tls_first, inbox_prefix (others are ignored). The file may hold secrets: its contents
// are never logged; errors name the file only.
#pragma once

#include <optional>
#include <string>

#include "libbus/nats_connection.h"

namespace kvidx::bus {

struct NatsContext {
  std::string path;  // the file read
  std::string url;   // empty when the context has none
  NatsAuth auth;
};

// The file NAME refers to (see above).
std::string nats_context_path(const std::string& name);

// Reads NAME; nullopt with a one-line `error` when the file is missing or not a context.
std::optional<NatsContext> load_nats_context(const std::string& name, std::string& error);

}  // namespace kvidx::bus
