#include "tests/support/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvidx::testing {
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

namespace {

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& in, const std::string& out,
            const std::string& err) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    auto redirect = [](const std::string& path, int fd, int flags) {
      if (path.empty()) return;
      const int opened = open(path.c_str(), flags, 0644);
      if (opened < 0) _exit(127);
      dup2(opened, fd);
      close(opened);
    };
    redirect(in, STDIN_FILENO, O_RDONLY);
    redirect(out, STDOUT_FILENO, O_WRONLY | O_CREAT | O_TRUNC);
    redirect(err, STDERR_FILENO, O_WRONLY | O_CREAT | O_TRUNC);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

std::string built_binary(const std::string& name) {
  // KVIDX_TEST_BIN_DIR lets one test build drive another build's binaries: scripts/test runs the
  // fault tests against the `kvidx` built under AddressSanitizer.
  const char* dir = std::getenv("KVIDX_TEST_BIN_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : KVIDX_BIN_DIR) + "/" + name;
}

CommandResult run_command(const std::vector<std::string>& args, const std::string& stdin_file) {
  TempDir dir;
  const pid_t pid = spawn(args, stdin_file.empty() ? "/dev/null" : stdin_file, dir.file("out"), dir.file("err"));
  int status = 0;
  waitpid(pid, &status, 0);
  return CommandResult{decode_status(status), read_text(dir.file("out")), read_text(dir.file("err"))};
}

ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::string& log_file)
    : pid_(spawn(args, "/dev/null", log_file, log_file + ".err")) {}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && status_ < 0) stop(SIGKILL);
}

bool ChildProcess::running() {
  if (status_ >= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    status_ = decode_status(status);
    return false;
  }
  return true;
}

int ChildProcess::stop(int signo) {
  if (status_ >= 0) return status_;
  kill(pid_, signo);
  int status = 0;
  waitpid(pid_, &status, 0);
  status_ = decode_status(status);
  return status_;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kvidx-test.XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace kvidx::testing
