#include "libbus/nats_context.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kvidx::bus {

std::string nats_context_path(const std::string& name) {
  if (name.find('/') != std::string::npos || (name.size() > 5 && name.ends_with(".json"))) return name;
  std::string base;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg != '\0') {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    base = std::string(home) + "/.config";
  } else {
    base = ".config";
  }
  return base + "/nats/context/" + name + ".json";
}

std::optional<NatsContext> load_nats_context(const std::string& name, std::string& error) {
  NatsContext out;
  out.path = nats_context_path(name);
  std::ifstream in(out.path);
  if (!in) {
    error = "nats context '" + name + "': cannot read " + out.path;
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    // NOTE: the parser's message would quote the file's text, which may hold a password.
    error = "nats context '" + name + "': " + out.path + " is not a JSON object";
    return std::nullopt;
  }
  auto text_field = [&](const char* key) -> std::string {
    const auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  out.url = text_field("url");
  out.auth.user = text_field("user");
  out.auth.password = text_field("password");
  out.auth.token = text_field("token");
  out.auth.creds_file = text_field("creds");
  out.auth.nkey_seed_file = text_field("nkey");
  out.auth.tls_cert = text_field("cert");
  out.auth.tls_key = text_field("key");
  out.auth.tls_ca = text_field("ca");
  out.auth.inbox_prefix = text_field("inbox_prefix");
  if (const auto it = doc.find("tls_first"); it != doc.end() && it->is_boolean()) out.auth.tls_first = it->get<bool>();
  return out;
}

}  // namespace kvidx::bus
