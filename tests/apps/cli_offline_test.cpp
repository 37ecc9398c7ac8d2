// The offline CLI contract (kvidx replay / dump --events / stats --events), run as a user would.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "replay/event_log_writer.h"
#include "tests/support/child_process.h"
#include "tests/support/event_builders.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

const std::string kKvidx = built_binary("kvidx");

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// `e` as its publisher's event number `id` (ids rise per (worker, rank); a repeated id would be a
// duplicate, skipped offline as live).
RouterEvent with_id(RouterEvent e, std::uint64_t id) {
  e.event.event_id = id;
  return e;
}

// Two workers sharing [1,2,3]; worker 1 continues with [4,5], worker 2 with [6]; worker 2 rank 1 holds [1].
void write_sample_log(const std::string& path, bool with_bad_line) {
  EventLogWriter out(path);
  out.write(make_store_event(1, {1, 2, 3}));
  out.write(with_id(make_store_event_with_parent(1, {1, 2, 3}, {4, 5}), 1));
  out.write(make_store_event(2, {1, 2, 3}));
  out.write(with_id(make_store_event_with_parent(2, {1, 2, 3}, {6}), 1));
  out.write(make_store_event_with_dp_rank(2, {1}, 1));
  if (with_bad_line) out.write_raw_line(R"({"worker_id": -4, "event": {}})");
  out.write_raw_line("");
  REQUIRE(out.close());
}

}  // namespace

TEST_CASE("kvidx --help lists every subcommand and the exit codes") {
  auto result = run_command({kKvidx, "--help"});
  CHECK(result.exit_code == 0);
  for (const char* name : {"serve", "replay", "capture", "dump", "score", "stats"}) {
    CAPTURE(name);
    CHECK(result.out.find(std::string("  ") + name) != std::string::npos);
  }
  CHECK(result.out.find("Exit codes") != std::string::npos);
  CHECK(run_command({kKvidx}).exit_code == 2);
  CHECK(run_command({kKvidx, "replay", "--no-such-flag"}).exit_code == 2);
}

TEST_CASE("kvidx replay answers queries sorted by worker and rank, only scores above zero") {
  TempDir dir;
  write_sample_log(dir.file("events.jsonl"), false);
  {
    std::ofstream queries(dir.file("queries.jsonl"));
    queries << R"({"id": "a", "local_hashes": [1, 2, 3, 4, 5]})"
            << "\n\n";
    queries << R"({"id": 2, "local_hashes": [1, 2, 3, 6]})"
            << "\n";
    queries << R"({"id": null, "local_hashes": [9]})"
            << "\n";
  }
  auto result = run_command({kKvidx, "replay", "--events", dir.file("events.jsonl"), "--queries",
                             dir.file("queries.jsonl"), "--scores-out", dir.file("scores.jsonl")});
  CHECK_MESSAGE(result.exit_code == 0, result.err);
  const auto lines = lines_of(read_file(dir.file("scores.jsonl")));
  REQUIRE(lines.size() == 3);
  CHECK(
      nlohmann::json::parse(lines[0]) ==
      nlohmann::json::parse(
          R"({"id":"a","scores":[{"worker_id":1,"dp_rank":0,"score":5},{"worker_id":2,"dp_rank":0,"score":3},{"worker_id":2,"dp_rank":1,"score":1}]})"));
  CHECK(
      nlohmann::json::parse(lines[1]) ==
      nlohmann::json::parse(
          R"({"id":2,"scores":[{"worker_id":1,"dp_rank":0,"score":3},{"worker_id":2,"dp_rank":0,"score":4},{"worker_id":2,"dp_rank":1,"score":1}]})"));
  CHECK(nlohmann::json::parse(lines[2]) == nlohmann::json::parse(R"({"id":null,"scores":[]})"));
  CHECK(result.err.find("stored") != std::string::npos);
  CHECK(result.err.find("events/s") != std::string::npos);
}

TEST_CASE("kvidx replay --snapshot-out replays to an identical dump") {
  TempDir dir;
  write_sample_log(dir.file("events.jsonl"), false);
  auto first = run_command(
      {kKvidx, "replay", "--events", dir.file("events.jsonl"), "--snapshot-out", dir.file("snapshot.jsonl.gz")});
  REQUIRE_MESSAGE(first.exit_code == 0, first.err);
  auto dump_original = run_command({kKvidx, "dump", "--events", dir.file("events.jsonl")});
  auto dump_restored = run_command({kKvidx, "dump", "--events", dir.file("snapshot.jsonl.gz")});
  REQUIRE(dump_original.exit_code == 0);
  REQUIRE(dump_restored.exit_code == 0);
  // Event order follows the tree's layout, which differs between two trees built from different
  // event sequences; the index they describe is compared in the reference's normal form.
  auto normal_form = [](const std::string& text) {
    std::vector<RouterEvent> events;
    for (const auto& line : lines_of(text)) {
      auto decoded = decode_router_event(line);
      REQUIRE(decoded.ok());
      events.push_back(std::move(decoded).value());
    }
    return snapshot_events(std::move(events));
  };
  CHECK(lines_of(dump_original.out).size() >= 3);
  CHECK(normal_form(dump_original.out) == normal_form(dump_restored.out));
}

TEST_CASE("bad lines are skipped and counted, --strict stops with file:line, --fail-on-bad exits 3") {
  TempDir dir;
  write_sample_log(dir.file("events.jsonl"), true);
  auto lenient = run_command({kKvidx, "replay", "--events", dir.file("events.jsonl")});
  CHECK(lenient.exit_code == 0);
  CHECK(lenient.err.find("1 bad lines") != std::string::npos);
  CHECK(lenient.err.find("bad line 6: worker_id: expected an unsigned 64-bit integer, got negative integer") !=
        std::string::npos);

  auto strict = run_command({kKvidx, "replay", "--strict", "--events", dir.file("events.jsonl")});
  CHECK(strict.exit_code == 3);
  CHECK(strict.err.find(dir.file("events.jsonl") + ":6: worker_id:") != std::string::npos);

  CHECK(run_command({kKvidx, "replay", "--fail-on-bad", "--events", dir.file("events.jsonl")}).exit_code == 3);
  auto missing = run_command({kKvidx, "replay", "--events", dir.file("nope.jsonl")});
  CHECK(missing.exit_code == 1);
  CHECK(lines_of(missing.err).size() == 1);  // one clear line
}

TEST_CASE("replay: a line with bytes after its event is a bad line, --strict stops there with the offset") {
  TempDir dir;
  const std::string path = dir.file("trailing.jsonl");
  {
    EventLogWriter out(path);
    out.write(make_store_event(1, {1, 2, 3}));
    out.write_raw_line(encode_router_event(with_id(make_store_event_with_parent(1, {1, 2, 3}, {4}), 1)) +
                       " \t");  // whitespace: fine
    std::string garbage = encode_router_event(with_id(make_store_event_with_parent(1, {1, 2, 3, 4}, {5}), 2));
    const std::size_t offset = garbage.size();
    garbage.append(std::string("\0\0garbage", 9));
    out.write_raw_line(garbage);
    REQUIRE(out.close());
    const std::string reason = "invalid JSON: trailing bytes after the JSON value at offset " + std::to_string(offset);

    auto strict = run_command({kKvidx, "replay", "--strict", "--events", path});
    CHECK(strict.exit_code == 3);
    CHECK(strict.err.find(path + ":3: " + reason) != std::string::npos);

    auto lenient = run_command({kKvidx, "replay", "--events", path, "--snapshot-out", dir.file("snap.jsonl")});
    CHECK(lenient.exit_code == 0);
    CHECK(lenient.err.find("1 bad lines") != std::string::npos);
    CHECK(lenient.err.find("bad line 3: " + reason) != std::string::npos);
    // The rejected line's event is not applied: blocks 1-4 only.
    std::size_t blocks = 0;
    for (const auto& line : lines_of(read_file(dir.file("snap.jsonl")))) {
      const auto event = nlohmann::json::parse(line);
      blocks += event.at("event").at("data").at("stored").at("blocks").size();
    }
    CHECK(blocks == 4);
  }
}

TEST_CASE("kvidx stats --events prints one JSON object with counts and the edge histogram") {
  TempDir dir;
  write_sample_log(dir.file("events.jsonl"), false);
  auto result = run_command({kKvidx, "stats", "--events", dir.file("events.jsonl")});
  REQUIRE_MESSAGE(result.exit_code == 0, result.err);
  const auto stats = nlohmann::json::parse(result.out);
  CHECK(stats["workers"] == 2);
  CHECK(stats["streams"] == 3);
  CHECK(stats["blocks"] == 5 + 4 + 1);
  CHECK(stats["distinct_blocks"] == 6);
  CHECK(stats["edge_length_histogram"] == nlohmann::json::parse(R"({"1": 1, "2": 1, "3": 1})"));
  CHECK(stats["events_by_type"]["stored"] == 5);
  CHECK(stats["events_by_result"]["ok"] == 5);
}

TEST_CASE("kvidx dump --tree prints edges with their covering worker/rank") {
  TempDir dir;
  write_sample_log(dir.file("events.jsonl"), false);
  auto result = run_command({kKvidx, "dump", "--tree", "--events", dir.file("events.jsonl")});
  REQUIRE_MESSAGE(result.exit_code == 0, result.err);
  CHECK(result.out ==
        "[1] (1 block) 1/0 2/0 2/1\n"
        "  [2 3] (2 blocks) 1/0 2/0\n"
        "    [4 5] (2 blocks) 1/0\n"
        "    [6] (1 block) 2/0\n\n");
  CHECK(run_command({kKvidx, "dump"}).exit_code == 2);
}
