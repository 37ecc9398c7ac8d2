// The kvidx subcommands that connect to NATS, each with what it needs besides its NATS options to
// get as far as connecting: the tests that hold every one of them to the same connection contract
// (exit codes, one-line errors, credentials, TLS) iterate over this one list.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "tests/support/child_process.h"

namespace kvidx::testing {

// `dir` holds events.jsonl (publish reads it) and receives capture's output.
inline std::vector<std::vector<std::string>> connecting_commands(const TempDir& dir) {
  return {
      {"serve", "--metrics", "off", "--snapshot-interval", "0"},
      {"capture", "--out", dir.file("captured.jsonl"), "--duration", "1"},
      {"publish", "--events", dir.file("events.jsonl")},
      {"bridge", "--zmq", "tcp://127.0.0.1:1", "--worker-id", "1", "--block-size", "16"},
      {"score", "--hashes", "1,2", "--timeout", "1"},
      {"stats", "--timeout", "1"},
      {"dump", "--timeout", "1"},
      {"workers", "--timeout", "1"},
  };
}

inline std::size_t line_count(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace kvidx::testing
