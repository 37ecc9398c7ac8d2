#include "tests/support/nats_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kvidx::testing {
namespace {

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

bool can_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr = loopback(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int find_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr = loopback(0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    throw std::runtime_error("bind(127.0.0.1:0) failed");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

NatsServer::NatsServer(NatsServerOptions options) : options_(std::move(options)) {
  std::string templ = (std::filesystem::temp_directory_path() / "kvidx-nats-XXXXXX").string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = buf.data();
  store_dir_ = dir_ + "/js";
  log_file_ = dir_ + "/nats.log";
  // NOTE: a port found free can be taken before nats-server binds it; retry with a new one.
  for (int attempt = 0;; ++attempt) {
    port_ = find_free_port();
    try {
      start();
      return;
    } catch (const std::exception&) {
      if (attempt >= 4) {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        throw;
      }
    }
  }
}

NatsServer::~NatsServer() {
  if (pid_ > 0) signal_and_wait(SIGTERM);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string NatsServer::url() const { return "nats://127.0.0.1:" + std::to_string(port_); }

std::string NatsServer::log() const { return read_file(log_file_); }

void NatsServer::start() {
  const std::string port = std::to_string(port_);
  std::vector<std::string> args = {"nats-server", "-js", "-a",       "127.0.0.1", "-p",
                                   port,          "-sd", store_dir_, "-l",        log_file_};
  if (options_.max_payload > 0 || !options_.config_text.empty()) {
    // NOTE: max_payload and mappings have no command-line flag; they go in a config file (the flags still win).
    const std::string config = dir_ + "/nats.conf";
    std::ofstream out(config);
    if (options_.max_payload > 0) out << "max_payload: " << options_.max_payload << "\n";
    out << options_.config_text << "\n";
    args.insert(args.end(), {"-c", config});
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::execvp("nats-server", argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("nats-server exited during start: " + read_file(log_file_));
    }
    if (can_connect(port_)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  signal_and_wait(SIGKILL);
  throw std::runtime_error("nats-server not ready within 10 s on port " + port);
}

void NatsServer::signal_and_wait(int signo) {
  if (pid_ <= 0) return;
  ::kill(pid_, signo);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

void NatsServer::stop() { signal_and_wait(SIGTERM); }

void NatsServer::kill9() { signal_and_wait(SIGKILL); }

void NatsServer::restart() {
  if (pid_ > 0) stop();
  // NOTE: the old listener may linger briefly; start() waits for the new process to accept.
  for (int attempt = 0;; ++attempt) {
    try {
      start();
      return;
    } catch (const std::exception&) {
      if (attempt >= 20) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace kvidx::testing
