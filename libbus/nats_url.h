// NATS server URLs as the operator gives them (one URL or a comma-separated list, each possibly
// with credentials: nats://user:password@host:port or nats://token@host:port).
#pragma once

#include <string>
#include <string_view>

namespace kvidx::bus {

// The URL(s) with every user-info part (what precedes '@' after "//") replaced by "***", so
// credentials never reach a log line or an error message.
std::string redact_url(std::string_view urls);

}  // namespace kvidx::bus
