// The progress line of a long replay (what `kvidx replay` shows on a terminal): events/s, bytes of
// the file read, and, when the file's size is known, the share read and an ETA. Gzip logs count
// compressed bytes against the compressed size.
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_writer.h"
#include "replay/offline_replay.h"
#include "tests/support/child_process.h"
#include "tests/support/event_builders.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

std::uint64_t file_size(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return static_cast<std::uint64_t>(info.st_size);
}

// Replays `path` with the progress line written to a temporary file at every chance; returns it.
std::string progress_of(const std::string& path) {
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  LaneIndexer indexer(2);
  ReplayOptions options;
  options.events_path = path;
  options.progress = true;
  options.progress_out = out;
  options.progress_after = std::chrono::milliseconds(0);
  options.progress_every = std::chrono::milliseconds(0);
  const ReplaySummary summary = replay_event_log(indexer, options);
  REQUIRE_MESSAGE(summary.ok(), summary.error);
  CHECK(summary.read.events == 20'000);
  std::string text;
  std::rewind(out);
  for (int c; (c = std::fgetc(out)) != EOF;) text.push_back(static_cast<char>(c));
  std::fclose(out);
  return text;
}

}  // namespace

TEST_CASE("the replay progress line shows events/s, bytes read of the file's size and an ETA") {
  TempDir dir;
  for (const char* name : {"events.jsonl", "events.jsonl.gz"}) {
    CAPTURE(name);
    const std::string path = dir.file(name);
    {
      EventLogWriter log(path);
      for (std::uint64_t i = 0; i < 20'000; ++i) log.write(make_store_event(i % 64, {i, i + 1, i + 2}));
      REQUIRE(log.close());
    }
    const std::string text = progress_of(path);
    INFO(text);
    // Rewritten in place: each line starts with a carriage return and erases what was there.
    REQUIRE(text.find("\r[replay] ") != std::string::npos);
    CHECK(text.find("events/s, ") != std::string::npos);
    CHECK(text.find("\033[K") != std::string::npos);
    // The size is that of the file as stored (compressed for .gz).
    const std::uint64_t size = file_size(path);
    const double bytes = static_cast<double>(size);
    const std::string of_size = size >= 1024 * 1024 ? fmt::format(" of {:.1f} MiB read (", bytes / (1024 * 1024))
                                                    : fmt::format(" of {:.1f} KiB read (", bytes / 1024);
    CHECK(text.find(of_size) != std::string::npos);
    CHECK(text.find(", ETA ") != std::string::npos);
    // Cleared at the end, so the summary that follows starts on a clean line.
    CHECK(text.substr(text.size() - 4) == "\r\033[K");
  }
}

TEST_CASE("the replay progress line without a known size (a pipe) shows bytes read and no ETA") {
  const std::string line = format_replay_progress(1'203'400, 8.4, ReadPosition{5 * 1024 * 1024 + 512 * 1024, 0});
  CHECK(line == "[replay] 1.20M events, 143k events/s, 5.5 MiB read");
  const std::string sized =
      format_replay_progress(300'000, 2.0, ReadPosition{100ull * 1024 * 1024, 400ull * 1024 * 1024});
  CHECK(sized == "[replay] 300k events, 150k events/s, 100.0 MiB of 400.0 MiB read (25%), ETA 6s");
}
