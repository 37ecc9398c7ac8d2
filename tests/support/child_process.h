// Running the built kvidx binary from tests: a command to completion with its output captured,
// or a long-running child (kvidx serve) stopped by PID.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace kvidx::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The whole text of `path` (a ChildProcess's log, say); empty when it cannot be read.
std::string read_text(const std::string& path);

// Runs `args` (args[0] is the program path) with stdin from `stdin_file` if non-empty.
CommandResult run_command(const std::vector<std::string>& args, const std::string& stdin_file = {});

// Path of a binary built into this build tree's bin/ directory, or into $KVIDX_TEST_BIN_DIR when set.
std::string built_binary(const std::string& name);

class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& args, const std::string& log_file);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  // SIGTERM (or `signo`), then waits; returns the exit status (or 128 + signal).
  int stop(int signo = 15);

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

// A fresh temporary directory removed (recursively) by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvidx::testing
