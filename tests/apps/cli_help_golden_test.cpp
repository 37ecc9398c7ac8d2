// The kvidx command line as a user meets it, pinned: every command's --help byte for byte, and the
// usage errors of each kind of option declaration (ranges, choices, required, needs, excludes,
// lists, the config file), with their exit codes. The options are declared in apps/kvidx/ and
// turned into CLI11 calls in one place (apps/kvidx/cli_parser.cpp); these tests hold that the
// translation shows the user exactly what CLI11 showed when each command called it directly.
//
// The golden --help texts live in tests/data/cli_help/ (one file per command path). They are
// regenerated only deliberately, after a change of the CLI: tests/data/cli_help/regenerate.sh
// [build/bin/kvidx], then review `git diff tests/data/cli_help` and commit it with the change.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "tests/support/child_process.h"

using namespace kvidx::testing;

namespace {

const std::string kKvidx = built_binary("kvidx");
const std::string kGoldenDir = std::string(KVIDX_SOURCE_DIR) + "/tests/data/cli_help";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The golden text of `path` ({"nkey", "new"} -> kvidx_nkey_new.txt).
std::string golden_help(const std::vector<std::string>& path) {
  std::string file = kGoldenDir + "/kvidx";
  for (const std::string& name : path) file += "_" + name;
  return read_file(file + ".txt");
}

// The names listed under "Subcommands:" in a --help text.
std::vector<std::string> subcommands_in(const std::string& help) {
  std::vector<std::string> names;
  std::istringstream in(help);
  bool listing = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "Subcommands:") {
      listing = true;
    } else if (listing && line.empty()) {
      listing = false;
    } else if (listing) {
      std::istringstream words(line);
      std::string name;
      words >> name;
      names.push_back(name);
    }
  }
  return names;
}

}  // namespace

TEST_CASE("kvidx --help of every command and nested subcommand equals its golden file in tests/data/cli_help") {
  std::vector<std::vector<std::string>> pending{{}};
  std::set<std::string> checked_files;
  while (!pending.empty()) {
    const std::vector<std::string> path = pending.back();
    pending.pop_back();
    std::vector<std::string> args{kKvidx};
    args.insert(args.end(), path.begin(), path.end());
    args.push_back("--help");
    const CommandResult result = run_command(args);
    std::string file = "kvidx";
    for (const std::string& name : path) file += "_" + name;
    checked_files.insert(file + ".txt");
    CAPTURE(file);
    CHECK(result.exit_code == 0);
    CHECK(result.err.empty());
    // NOTE: a new subcommand fails here until its golden file is generated (regenerate.sh).
    REQUIRE(std::filesystem::exists(kGoldenDir + "/" + file + ".txt"));
    CHECK(result.out == golden_help(path));
    for (const std::string& sub : subcommands_in(result.out)) {
      std::vector<std::string> child = path;
      child.push_back(sub);
      pending.push_back(child);
    }
  }
  // Every command of today's CLI, nested ones included, and no golden file for a command that is gone.
  CHECK(checked_files.size() == 14);
  for (const auto& entry : std::filesystem::directory_iterator(kGoldenDir)) {
    if (entry.path().extension() != ".txt") continue;
    CAPTURE(entry.path().filename().string());
    CHECK(checked_files.count(entry.path().filename().string()) == 1);
  }
  // -h is --help, for nested subcommands too.
  CHECK(run_command({kKvidx, "nkey", "new", "-h"}).out == golden_help({"nkey", "new"}));
}

TEST_CASE("kvidx usage errors name the option CLI11's way and exit 2, from flags and from serve --config") {
  TempDir dir;
  const auto config = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir.file(name)) << content;
    return dir.file(name);
  };
  struct Case {
    std::vector<std::string> args;
    std::string err;
  };
  const std::string more = "\nRun with --help for more information.\n";
  const std::vector<Case> cases = {
      {{"serve", "--lanes", "0"}, "--lanes: Value 0 not in range 1 to 256" + more},
      {{"serve", "--lanes", "abc"}, "--lanes: Value abc not in range 1 to 256" + more},
      {{"serve", "--lanes", "3", "--lanes", "5"}, "--lanes: At Most 1 required but received 2" + more},
      {{"serve", "--max-message-bytes", "10"}, "--max-message-bytes: Value 10 not in range 64 to 1073741824" + more},
      {{"serve", "--fetch-batch", "1.5"}, "--fetch-batch: Value 1.5 not in range 1 to 100000" + more},
      {{"serve", "extra"}, "The following argument was not expected: extra" + more},
      {{"bridge"}, "--worker-id is required" + more},
      {{"bridge", "--worker-id", "1", "--block-size", "16", "--mode", "foo"},
       "--mode: foo not in {jetstream,core}" + more},
      // NOTE: CLI11 2.1's PositiveNumber words its refusal as a range of doubles.
      {{"bridge", "--worker-id", "1", "--block-size", "0"},
       "--block-size: Value 0 not in range 0.000000 to " + std::to_string(std::numeric_limits<double>::max()) + more},
      {{"score", "--hashes", "1", "--tokens-file", "x", "--block-size", "4"}, "--hashes excludes --tokens-file" + more},
      {{"score", "--eagle", "--hashes", "1"}, "--eagle requires --tokens-file" + more},
      {{"score", "--tokens-file", "x"}, "--tokens-file requires --block-size" + more},
      {{"score", "--hashes", "1,2,x"}, "Could not convert: --hashes = 1,2,x" + more},
      {{"score", "--tokens-file", "x", "--block-size", "0"}, "--block-size: Value 0 not in range 1 to 1048576" + more},
      {{"score", "--hashes", "1", "--retries", "11"}, "--retries: Value 11 not in range 0 to 10" + more},
      {{"stats", "--window", "1", "--events", "x"}, "--window requires --all" + more},
      {{"stats", "--all", "--events", "x"}, "--all excludes --events" + more},
      {{"stats", "--nats", "--events", "x"}, "--nats excludes --events" + more},
      {{"stats", "--all", "--window", "100", "--nats"},
       "--window: Value 100 not in range 0.050000 to 60.000000" + more},
      {{"dump", "--nats", "x", "--events", "y"}, "--nats excludes --events" + more},
      {{"replay", "--events", "e", "--decode-threads", "65"}, "--decode-threads: Value 65 not in range 0 to 64" + more},
      {{"remove-worker", "--worker-id", "3", "--dp-rank", "x"}, "Could not convert: --dp-rank = x" + more},
      {{"nkey"}, "A subcommand is required" + more},
      {{"nkey", "public", "--seed-file", "/nonexistent/seed"},
       "--seed-file: File does not exist: /nonexistent/seed" + more},
      {{"serve", "--config", config("unknown.toml", "nope = 1\n"), "--check-config"},
       "unknown key 'nope' in " + dir.file("unknown.toml") + more},
      {{"serve", "--config", config("check.toml", "check-config = true\n")},
       "unknown key 'check-config' in " + dir.file("check.toml") + more},
      {{"serve", "--config", config("bad.toml", "lanes = 0\n"), "--check-config"},
       "--lanes: Value 0 not in range 1 to 256" + more},
      {{"serve", "--config", config("section.toml", "[serve]\nlanes = 3\n"), "--check-config"},
       "unexpected section in " + dir.file("section.toml") + ": serve.lanes" + more},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{kKvidx};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CommandResult result = run_command(args);
    CAPTURE(c.args);
    CHECK(result.exit_code == 2);
    CHECK(result.out.empty());
    CHECK(result.err == c.err);
  }
}

TEST_CASE("kvidx serve --config: keys are the long flags, '_' for '-', and the command line wins") {
  TempDir dir;
  std::ofstream(dir.file("kvidx.toml")) << "lanes = 8\nsubject_prefix = \"fleet\"\nmode = \"core\"\n"
                                        << "metrics = \"off\"\napproximate = true\n";
  const CommandResult result = run_command(
      {kKvidx, "serve", "--config", dir.file("kvidx.toml"), "--lanes", "2", "--check-config", "--nats", "nats://x:1"});
  CHECK(result.exit_code == 0);
  CHECK(result.out.find("mode core, 2 lanes, prefix 'fleet', durable 'kvidx', metrics off,") != std::string::npos);
}
