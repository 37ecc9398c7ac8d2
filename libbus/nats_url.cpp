#include "libbus/nats_url.h"

namespace kvidx::bus {

std::string redact_url(std::string_view urls) {
  std::string out;
  out.reserve(urls.size());
  while (!urls.empty()) {
    const std::size_t comma = urls.find(',');
    std::string_view url = urls.substr(0, comma);
    // NOTE: user info ends at the last '@' before the host part's first '/', so a password
    // holding '@' or ':' is hidden whole.
    const std::size_t scheme = url.find("//");
    const std::size_t host_from = scheme == std::string_view::npos ? 0 : scheme + 2;
    const std::size_t path = url.find('/', host_from);
    const std::size_t at = url.substr(0, path).rfind('@');
    if (at != std::string_view::npos && at >= host_from) {
      out.append(url.substr(0, host_from));
      out.append("***");
      out.append(url.substr(at));
    } else {
      out.append(url);
    }
    if (comma == std::string_view::npos) break;
    out.push_back(',');
    urls.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace kvidx::bus
