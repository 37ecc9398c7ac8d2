// The event-log reader with decode threads against the sequential one: same events in the same
// order, same counts, same bad lines with the same line numbers and reasons, the same stop at a bad
// line or on a stop request, plain and gzip, from a file and from stdin; decode threads chosen from
// the input's first bytes; and a replay with decode threads leaves exactly the index a sequential
// replay leaves.
#include <doctest/doctest.h>
#include <zlib.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "libcodec/event_codec.h"
#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_reader.h"
#include "replay/offline_replay.h"
#include "tests/support/child_process.h"
#include "tests/support/dump_holdings.h"
#include "tests/support/stdin_from_file.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

// A log of `events` lines over 64 streams taking turns at random, each stream's ids in order but
// with duplicates and gaps; bare and wrapped lines, blank and CRLF lines, bad lines here and there,
// and no newline after the last line. Big enough to span several of the reader's 1 MiB chunks.
std::string make_log_text(std::size_t events, bool with_bad_lines, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> next_id(64, 0);
  std::string text;
  for (std::size_t i = 0; i < events; ++i) {
    const std::size_t s = rng() % 64;
    const std::uint64_t pick = rng() % 100;
    if (pick < 2) text += "\n";
    if (pick == 2) text += " \t\n";
    if (with_bad_lines && pick == 3)
      text += R"({"worker_id":1,"event":{"event_id":"x","data":"cleared"}})"
              "\n";
    if (with_bad_lines && pick == 4) text += "not json at all\n";
    EventLogLine line;
    line.event.worker_id = s / 2 + 1;
    line.event.event.dp_rank = static_cast<DpRank>(s % 2);
    std::uint64_t& id = next_id[s];
    line.event.event.event_id = id;
    id += pick < 90 ? 1 : (pick < 95 ? 0 : 3);  // mostly in order, some duplicates, some gaps
    if (rng() % 10 == 0) {
      line.event.event.data = KvCacheClearData{};
    } else {
      KvCacheStoreData d;
      for (std::uint64_t b = 0; b < 1 + rng() % 21; ++b) {
        const std::uint64_t h = (s << 32) + (line.event.event.event_id % 37) * 64 + b + 1;
        d.blocks.push_back(StoredBlock{{h}, {h * 31}});
      }
      if (line.event.event.event_id % 37 != 0 && rng() % 2 == 0) {
        d.parent_hash = ExternalSequenceBlockHash{(s << 32) + (line.event.event.event_id % 37 - 1) * 64 + 1};
      }
      line.event.event.data = std::move(d);
    }
    if (rng() % 2 == 0) {
      line.ts = 1.7e9 + static_cast<double>(i);
      line.subject = "kv.events." + std::to_string(line.event.worker_id);
    }
    text += encode_event_log_line(line);
    text += rng() % 10 == 0 ? "\r\n" : "\n";
  }
  text += encode_router_event(RouterEvent{7, KvCacheEvent{999999, KvCacheClearData{}, 1}, std::nullopt});
  return text;  // NOTE: the last line has no newline
}

void write_file(const std::string& path, const std::string& text, bool gzip) {
  if (!gzip) {
    std::ofstream(path, std::ios::binary) << text;
    return;
  }
  gzFile file = gzopen(path.c_str(), "wb1");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

struct Read {
  std::vector<EventLogLine> lines;
  EventLogReadResult result;
};

Read read_with(const std::string& path, BadLinePolicy policy, std::size_t threads, std::size_t stop_after = 0) {
  Read out;
  std::atomic<bool> stop{false};
  EventLogReadOptions options;
  options.decode_threads = threads;
  options.stop = &stop;
  out.result = read_event_log(
      path, policy,
      [&](EventLogLine&& line) {
        out.lines.push_back(std::move(line));
        if (stop_after > 0 && out.lines.size() == stop_after) stop = true;
      },
      options);
  return out;
}

void check_same(const Read& parallel, const Read& sequential) {
  CHECK(parallel.result.error == sequential.result.error);
  CHECK(parallel.result.stopped == sequential.result.stopped);
  const auto& a = parallel.result.stats;
  const auto& b = sequential.result.stats;
  CHECK(a.lines == b.lines);
  CHECK(a.events == b.events);
  CHECK(a.bad_lines == b.bad_lines);
  REQUIRE(a.first_bad_lines.size() == b.first_bad_lines.size());
  for (std::size_t i = 0; i < a.first_bad_lines.size(); ++i) {
    CHECK(a.first_bad_lines[i].line_number == b.first_bad_lines[i].line_number);
    CHECK(a.first_bad_lines[i].reason == b.first_bad_lines[i].reason);
  }
  REQUIRE(parallel.lines.size() == sequential.lines.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < parallel.lines.size(); ++i) {
    const auto& x = parallel.lines[i];
    const auto& y = sequential.lines[i];
    if (!(x.event == y.event) || x.subject != y.subject || x.ts != y.ts) ++differing;
  }
  CHECK(differing == 0);
}

}  // namespace

TEST_CASE("the reader with decode threads hands on what the sequential reader does, bad lines and stops included") {
  TempDir dir;
  const std::string text = make_log_text(12000, true, 7);
  REQUIRE(text.size() > (3u << 20));  // several 1 MiB chunks
  for (const bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string path = dir.file(gzip ? "log.jsonl.gz" : "log.jsonl");
    write_file(path, text, gzip);
    const Read skip = read_with(path, BadLinePolicy::skip, 0);
    REQUIRE(skip.result.ok());
    REQUIRE(skip.result.stats.bad_lines > 100);  // not vacuous
    const Read stop = read_with(path, BadLinePolicy::stop, 0);
    REQUIRE(!stop.result.ok());
    const Read interrupted = read_with(path, BadLinePolicy::skip, 0, 5000);
    REQUIRE(interrupted.result.stopped);
    for (const std::size_t threads : {1u, 2u, 5u}) {
      CAPTURE(threads);
      check_same(read_with(path, BadLinePolicy::skip, threads), skip);
      check_same(read_with(path, BadLinePolicy::stop, threads), stop);
      check_same(read_with(path, BadLinePolicy::skip, threads, 5000), interrupted);
    }
  }
}

TEST_CASE("the reader with decode threads reads lines longer than its chunks, whatever buffers it reuses") {
  // A line spanning several reads leaves the reader a pending part larger than a read: the chunk
  // it ends in needs a bigger buffer than the ones decoded chunks give back, and the next chunks
  // reuse buffers of either size.
  TempDir dir;
  const std::string part = make_log_text(4000, false, 11);
  std::string text = part + "\n{\"worker_id\":1," + std::string(2500000, ' ') + "}\n" + part + "\n" +
                     std::string(1300000, 'x') + "\n" + part;
  for (const bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string path = dir.file(gzip ? "long.jsonl.gz" : "long.jsonl");
    write_file(path, text, gzip);
    const Read sequential = read_with(path, BadLinePolicy::skip, 0);
    REQUIRE(sequential.result.ok());
    REQUIRE(sequential.result.stats.bad_lines == 2);  // the two long lines
    REQUIRE(sequential.lines.size() > 8000);
    for (const std::size_t threads : {1u, 3u}) {
      CAPTURE(threads);
      check_same(read_with(path, BadLinePolicy::skip, threads), sequential);
    }
  }
}

TEST_CASE("the reader with decode threads reads plain and gzip logs from stdin as from the file") {
  TempDir dir;
  const std::string text = make_log_text(6000, true, 8);
  for (const bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string path = dir.file(gzip ? "log.jsonl.gz" : "log.jsonl");
    write_file(path, text, gzip);
    const Read from_file = read_with(path, BadLinePolicy::skip, 0);
    Read from_stdin;
    {
      testing::StdinFromFile feed(path);
      from_stdin = read_with("-", BadLinePolicy::skip, 2);
    }
    check_same(from_stdin, from_file);
  }
}

TEST_CASE("decode threads left to the reader are chosen from the input's first bytes, a file's or stdin's") {
  TempDir dir;
  const std::string text = make_log_text(3000, false, 11);
  // Names that lie: the content decides.
  const std::string gzip_path = dir.file("gzip.jsonl");
  const std::string plain_path = dir.file("plain.jsonl.gz");
  write_file(gzip_path, text, true);
  write_file(plain_path, text, false);
  const Read expected = read_with(plain_path, BadLinePolicy::skip, 0);
  REQUIRE(expected.lines.size() > 2000);
  for (const bool gzip : {false, true}) {
    for (const bool from_stdin : {false, true}) {
      CAPTURE(gzip);
      CAPTURE(from_stdin);
      const std::string& path = gzip ? gzip_path : plain_path;
      std::optional<bool> told_gzip;
      EventLogReadOptions options;
      options.decode_threads = 5;  // overruled by the chooser
      options.choose_decode_threads = [&](bool is_gzip) {
        told_gzip = is_gzip;
        return std::size_t{is_gzip ? 2u : 0u};
      };
      Read got;
      auto read = [&] {
        got.result = read_event_log(
            from_stdin ? "-" : path, BadLinePolicy::skip,
            [&](EventLogLine&& line) { got.lines.push_back(std::move(line)); }, options);
      };
      if (from_stdin) {
        StdinFromFile feed(path);
        read();
      } else {
        read();
      }
      REQUIRE(told_gzip.has_value());
      CHECK(*told_gzip == gzip);
      CHECK(got.result.decode_threads == (gzip ? 2u : 0u));
      check_same(got, expected);  // the bytes zlib looked at to tell were not lost
    }
  }
  // A replay left to choose (`kvidx replay --decode-threads auto`) uses default_decode_threads.
  for (const bool gzip : {false, true}) {
    CAPTURE(gzip);
    LaneIndexer indexer(2);
    ReplayOptions options;
    options.events_path = "-";
    options.lanes = 2;
    options.decode_threads = std::nullopt;
    StdinFromFile feed(gzip ? gzip_path : plain_path);
    const ReplaySummary summary = replay_event_log(indexer, options);
    REQUIRE(summary.ok());
    CHECK(summary.read.events == expected.lines.size());
    CHECK(summary.decode_threads == default_decode_threads(2, gzip));
  }
}

TEST_CASE("a replay with decode threads keeps each stream's order and leaves the index a sequential replay leaves") {
  TempDir dir;
  const std::string path = dir.file("log.jsonl");
  write_file(path, make_log_text(20000, false, 9), false);
  auto replay = [&](std::size_t threads) {
    LaneIndexer indexer(2);
    ReplayOptions options;
    options.events_path = path;
    options.lanes = 2;
    options.decode_threads = threads;
    const ReplaySummary summary = replay_event_log(indexer, options);
    REQUIRE(summary.ok());
    auto events = indexer.dump_events();
    REQUIRE(events);
    std::string jsonl;
    for (const RouterEvent& e : *events) jsonl += encode_router_event(e) + "\n";
    return std::make_pair(summary, dump_holdings(jsonl));
  };
  const auto [sequential, sequential_dump] = replay(0);
  REQUIRE(sequential.intake.duplicates() > 100);  // the log has duplicates and gaps to get right
  REQUIRE(sequential.intake.gaps > 100);
  REQUIRE(sequential_dump.size() > 1000);
  for (const std::size_t threads : {1u, 3u}) {
    CAPTURE(threads);
    const auto [parallel, parallel_dump] = replay(threads);
    CHECK(parallel.read.events == sequential.read.events);
    // Any reordering within a stream would change these counts.
    CHECK(parallel.intake.duplicates() == sequential.intake.duplicates());
    CHECK(parallel.intake.gaps == sequential.intake.gaps);
    CHECK(parallel.intake.missing_events == sequential.intake.missing_events);
    CHECK(parallel.events_by_kind == sequential.events_by_kind);
    CHECK(parallel.applied.applied == sequential.applied.applied);
    CHECK(parallel_dump == sequential_dump);
  }
}
