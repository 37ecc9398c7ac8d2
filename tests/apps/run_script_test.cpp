// scripts/run as an operator uses it: started from a terminal (its own process group), events
// published, then Ctrl-C (SIGINT to the whole group, as a terminal sends it). kvidx must drain and
// write its final snapshot to the embedded nats-server before that server stops.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "replay/event_log_writer.h"
#include "tests/support/child_process.h"
#include "tests/support/event_builders.h"
#include "tests/support/nats_server.h"
#include "tests/support/wait_until.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

const std::string kKvidx = built_binary("kvidx");

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The script in a process group of its own with SIGINT at its default (a shell started in the
// background may have inherited it ignored), stdout and stderr into `log`.
pid_t start_in_own_group(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = open("/dev/null", O_RDONLY);
    if (out < 0 || in < 0) _exit(127);
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);  // NOTE: also here, so the group exists before the first killpg
  return pid;
}

int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      killpg(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_SUITE("integration") {

TEST_CASE("scripts/run: Ctrl-C stops kvidx with a final snapshot, then the embedded nats-server") {
  TempDir dir;
  {
    EventLogWriter log(dir.file("events.jsonl"));
    log.write(make_store_event(1, {1, 2, 3}));
    log.write(make_store_event(2, {1, 2}));
    REQUIRE(log.close());
  }
  const std::string log_file = dir.file("run.log");
  const pid_t script =
      start_in_own_group({"bash", std::string(KVIDX_SOURCE_DIR) + "/scripts/run", "--kvidx", kKvidx, "--port",
                          std::to_string(find_free_port()), "--", "--metrics", "off", "--snapshot-interval", "0"},
                         log_file);

  std::string url;
  const std::regex url_line(R"(embedded nats-server \(JetStream\) on (nats://127\.0\.0\.1:\d+), store (\S+),)");
  std::smatch match;
  std::string store;
  const bool started = wait_until(
      [&] {
        const std::string text = slurp(log_file);
        if (!std::regex_search(text, match, url_line)) return false;
        url = match[1];
        store = match[2];
        return run_command({kKvidx, "stats", "--nats", url, "--timeout", "1"}).exit_code == 0;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(100));
  if (!started) {
    killpg(script, SIGTERM);
    wait_exit(script, std::chrono::seconds(20));
  }
  REQUIRE_MESSAGE(started, slurp(log_file));
  auto published = run_command({kKvidx, "publish", "--nats", url, "--events", dir.file("events.jsonl")});
  REQUIRE_MESSAGE(published.exit_code == 0, published.err);
  REQUIRE(wait_until(
      [&] {
        auto stats = run_command({kKvidx, "stats", "--nats", url});
        return stats.out.find("\"blocks\":5") != std::string::npos;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(100)));

  // Ctrl-C: the terminal signals the whole foreground group.
  REQUIRE(killpg(script, SIGINT) == 0);
  const int code = wait_exit(script, std::chrono::seconds(30));
  const std::string text = slurp(log_file);
  INFO(text);
  CHECK(code == 130);
  // The final snapshot (of the published blocks) was written, and only then the server stopped.
  const auto shutting_down = text.find("shutting down");
  REQUIRE(shutting_down != std::string::npos);
  std::smatch snapshot;
  const std::string after = text.substr(shutting_down);
  CHECK(std::regex_search(after, snapshot, std::regex(R"(snapshot written: [1-9]\d* events)")));
  CHECK(text.find("final snapshot failed") == std::string::npos);
  const auto server_stopped = after.find("nats-server stopped");
  REQUIRE(server_stopped != std::string::npos);
  CHECK(static_cast<std::size_t>(snapshot.position(0)) < server_stopped);
  // Nothing left behind: the server is gone (its port refuses) and its temporary store removed.
  CHECK(run_command({kKvidx, "stats", "--nats", url, "--timeout", "0.5"}).exit_code == 4);
  CHECK_FALSE(std::filesystem::exists(store));
}

}  // TEST_SUITE("integration")
