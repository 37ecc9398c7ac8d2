// Test fixture: a real nats-server (JetStream on, loopback only) on a free port with its own
// temporary store directory. Started with fork/exec, stopped by PID (never by name). Supports a
// clean stop, kill -9 and a restart on the same port and store for fault-injection tests.
// No nats.c dependency: readiness is a TCP connect to the port.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvidx::testing {

struct NatsServerOptions {
  std::int64_t max_payload = 0;  // bytes; 0: the server's default (1 MiB)
  // Passed to nats-server after the fixture's own (e.g. {"--user", "u", "--pass", "p"}).
  std::vector<std::string> extra_args;
  // Extra lines of the server's config file (options without a flag, e.g. account `mappings`).
  std::string config_text;

  static NatsServerOptions with_max_payload(std::int64_t bytes) {
    NatsServerOptions o;
    o.max_payload = bytes;
    return o;
  }
  static NatsServerOptions with_args(std::vector<std::string> args) {
    NatsServerOptions o;
    o.extra_args = std::move(args);
    return o;
  }
};

class NatsServer {
 public:
  // Starts the server; throws std::runtime_error when it cannot start or is not ready in time.
  NatsServer() : NatsServer(NatsServerOptions{}) {}
  explicit NatsServer(NatsServerOptions options);
  ~NatsServer();
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  std::string url() const;  // nats://127.0.0.1:<port>
  int port() const { return port_; }
  const std::string& store_dir() const { return store_dir_; }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string log() const;  // the server's log so far (for failure messages)

  void stop();     // SIGTERM, then waitpid (SIGKILL after 10 s)
  void kill9();    // SIGKILL, then waitpid
  void restart();  // stop (if running) and start again on the same port and store
  // Takes effect at the next (re)start: clients reconnecting then see the new max_payload.
  void set_max_payload(std::int64_t bytes) { options_.max_payload = bytes; }

 private:
  void start();
  void signal_and_wait(int signo);

  NatsServerOptions options_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::string dir_;        // mkdtemp root, removed by the destructor
  std::string store_dir_;  // <dir_>/js
  std::string log_file_;   // <dir_>/nats.log
};

// A free TCP port on 127.0.0.1 (bind port 0, read it back, close).
int find_free_port();

}  // namespace kvidx::testing
