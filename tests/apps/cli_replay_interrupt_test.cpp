// kvidx replay as an operator meets it on long logs: every file is checked before any work, and
// Ctrl-C stops reading, applies what was read and prints that partial summary (exit 130).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "libcodec/event_codec.h"
#include "replay/event_log_writer.h"
#include "tests/support/child_process.h"
#include "tests/support/event_builders.h"

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

// `count` root Stored events of 4 blocks each, spread over 50 workers, as JSON Lines.
std::string events_text(std::uint64_t first, std::uint64_t count) {
  std::string out;
  for (std::uint64_t i = first; i < first + count; ++i) {
    RouterEvent event = make_store_event(i % 50, {i, i + 1, i + 2, i + 3});
    event.event.event_id = i / 50;
    out += encode_router_event(event);
    out += '\n';
  }
  return out;
}

bool write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void write_sample_log(const std::string& path) {
  EventLogWriter out(path);
  out.write(make_store_event(1, {1, 2, 3}));
  REQUIRE(out.close());
}

}  // namespace

TEST_CASE("kvidx replay checks every file before reading the log") {
  TempDir dir;
  write_sample_log(dir.file("events.jsonl"));
  {
    std::ofstream queries(dir.file("queries.jsonl"));
    queries << R"({"id": 1, "local_hashes": [1]})"
            << "\n";
  }
  auto one_line = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n') == 1; };

  // A missing --queries file fails at once: no replay, no summary.
  auto missing_queries = run_command({kKvidx, "replay", "--events", dir.file("events.jsonl"), "--queries",
                                      dir.file("nope.jsonl"), "--scores-out", dir.file("scores.jsonl")});
  CHECK(missing_queries.exit_code == 1);
  CHECK_MESSAGE(one_line(missing_queries.err), missing_queries.err);
  CHECK(missing_queries.err.find(dir.file("nope.jsonl") + ": cannot open: No such file or directory") !=
        std::string::npos);
  CHECK(missing_queries.err.find(" events in ") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("scores.jsonl")));

  auto directory_queries =
      run_command({kKvidx, "replay", "--events", dir.file("events.jsonl"), "--queries", dir.path()});
  CHECK(directory_queries.exit_code == 1);
  CHECK(directory_queries.err.find("is a directory") != std::string::npos);
  CHECK(directory_queries.err.find(" events in ") == std::string::npos);

  // Outputs that cannot be created are reported before the replay too.
  for (const char* flag : {"--scores-out", "--snapshot-out"}) {
    CAPTURE(flag);
    auto unwritable = run_command({kKvidx, "replay", "--events", dir.file("events.jsonl"), "--queries",
                                   dir.file("queries.jsonl"), flag, dir.file("no-such-dir/out.jsonl")});
    CHECK(unwritable.exit_code == 1);
    CHECK_MESSAGE(one_line(unwritable.err), unwritable.err);
    CHECK(unwritable.err.find("does not exist") != std::string::npos);
  }

  // Both from stdin cannot work.
  CHECK(run_command({kKvidx, "replay", "--events", "-", "--queries", "-"}).exit_code == 2);

  // A missing --events file: exit 1, one line (dump --events and stats --events alike).
  for (const char* command : {"replay", "dump", "stats"}) {
    CAPTURE(command);
    auto missing = run_command({kKvidx, command, "--events", dir.file("nope.jsonl")});
    CHECK(missing.exit_code == 1);
    CHECK_MESSAGE(one_line(missing.err), missing.err);
  }
}

TEST_CASE("kvidx replay: Ctrl-C stops reading and prints the partial summary, exit 130") {
  TempDir dir;
  {
    std::ofstream queries(dir.file("queries.jsonl"));
    queries << R"({"id": 1, "local_hashes": [1]})"
            << "\n";
  }
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const std::string err_file = dir.file("err");
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    dup2(fds[0], STDIN_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    const int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int out = open("/dev/null", O_WRONLY);
    dup2(err, STDERR_FILENO);
    dup2(out, STDOUT_FILENO);
    execl(kKvidx.c_str(), kKvidx.c_str(), "replay", "--events", "-", "--queries", dir.file("queries.jsonl").c_str(),
          "--scores-out", dir.file("scores.jsonl").c_str(), "--snapshot-out", dir.file("snapshot.jsonl").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(fds[0]);
  // NOTE: kvidx may close its end first; the write then fails instead of killing the test.
  auto* const previous_sigpipe = signal(SIGPIPE, SIG_IGN);

  // More than two of the reader's 1 MiB blocks: kvidx applies those, then waits for more input.
  const std::uint64_t first_batch = 15'000;
  const std::string head = events_text(0, first_batch);
  REQUIRE(head.size() > (2u << 20));
  CHECK(write_all(fds[1], head));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let it read (only sequencing, nothing timed)
  REQUIRE(::kill(pid, SIGINT) == 0);
  // Input that arrives after the Ctrl-C is not read.
  write_all(fds[1], events_text(first_batch, 1'000));
  ::close(fds[1]);

  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("kvidx replay did not stop within 30 s of Ctrl-C");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  signal(SIGPIPE, previous_sigpipe);
  const std::string err = slurp(err_file);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  std::smatch match;
  REQUIRE(std::regex_search(err, match, std::regex(R"(replay: INTERRUPTED after (\d+) events)")));
  const std::uint64_t read = std::stoull(match[1]);
  MESSAGE("events read before Ctrl-C: " << read);
  CHECK(read < first_batch + 1'000);
  // The partial summary: results of what was read, by type.
  CHECK(std::regex_search(err, std::regex("stored +" + std::to_string(read) + "  ok " + std::to_string(read) + " ")));
  CHECK(err.find("kvidx replay: interrupted") != std::string::npos);
  // No answers and no snapshot from a partial index.
  CHECK_FALSE(std::filesystem::exists(dir.file("scores.jsonl")));
  CHECK_FALSE(std::filesystem::exists(dir.file("snapshot.jsonl")));
}
