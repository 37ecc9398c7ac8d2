// kvidx-bench replay, second part: a large generated event log (1 M events of ~21 blocks by
// default) replayed as `kvidx replay` does it (replay_event_log: read, decode, intake, sticky
// lanes), plain and gzip, from a file and from stdin (a pipe fed by a thread, like `cat log |`),
// with the decode threads `kvidx replay` uses by default beside the other choice (2 decode threads
// when the default decodes on the applying thread, else that).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "bench/app/commands.h"
#include "bench/common/report.h"
#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_writer.h"
#include "replay/offline_replay.h"
#include "tests/support/stdin_from_file.h"

namespace kvidx::bench {
namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser: well-spread 64-bit hashes
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Per stream, repeating: three Stored events of `blocks` blocks (each extending the previous one's
// chain, a new chain every fourth), one Removed of the oldest held run of `blocks`; every 64th
// event of a stream is Cleared, which keeps the tree (and the run's memory) bounded. Streams take
// turns, one event each, as captured from a fleet; lines carry the capture wrapper.
std::uint64_t write_log(const std::string& path, std::size_t events, std::size_t blocks, std::size_t streams) {
  struct Stream {
    std::uint64_t next_id = 0;
    std::uint64_t next_run = 0;
    std::vector<std::vector<std::uint64_t>> held;  // runs of block hashes, oldest first
  };
  std::vector<Stream> state(streams);
  EventLogWriter writer(path);
  if (!writer.ok()) throw std::runtime_error(writer.error());
  for (std::size_t i = 0; i < events; ++i) {
    const std::size_t s = i % streams;
    Stream& st = state[s];
    EventLogLine line;
    line.ts = 1.7e9 + static_cast<double>(i) * 1e-4;
    line.event.worker_id = s / 2 + 1;
    line.subject = "kv.events." + std::to_string(line.event.worker_id);
    line.event.event.dp_rank = static_cast<DpRank>(s % 2);
    const std::uint64_t id = st.next_id++;
    line.event.event.event_id = id;
    if (id % 64 == 63) {
      line.event.event.data = KvCacheClearData{};
      st.held.clear();
    } else if (id % 4 == 3 && !st.held.empty()) {
      KvCacheRemoveData d;
      for (const std::uint64_t h : st.held.front()) d.block_hashes.push_back(ExternalSequenceBlockHash{h});
      st.held.erase(st.held.begin());
      line.event.event.data = std::move(d);
    } else {
      const std::uint64_t run = st.next_run++;
      KvCacheStoreData d;
      if (run % 4 != 0 && !st.held.empty()) d.parent_hash = ExternalSequenceBlockHash{st.held.back().back()};
      std::vector<std::uint64_t> hashes;
      for (std::size_t b = 0; b < blocks; ++b) {
        const std::uint64_t h = mix((static_cast<std::uint64_t>(s) << 40) ^ (run << 8) ^ b);
        hashes.push_back(h);
        d.blocks.push_back(StoredBlock{{h}, {mix(h ^ 0x5555)}});
      }
      st.held.push_back(std::move(hashes));
      line.event.event.data = std::move(d);
    }
    writer.write(line);
  }
  if (!writer.close()) throw std::runtime_error(writer.error());
  return std::filesystem::file_size(path);
}

// Waits until the kernel has written `path` to disk. NOTE: the logs are timed right after being
// written; without this, the kernel's writeback of their ~1.7 GB of dirty pages shares the two
// cores with the first replays, which then measure the bench's own writing.
void flush_to_disk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(path + ": cannot flush to disk: " + reason);
  }
  ::close(fd);
}

struct ReplayRate {
  double events_per_second = 0;
  std::size_t decode_threads = 0;  // what the replay used
};

// Events/s of replay_event_log over `path` (or stdin fed from it); `decode_threads` not set: the
// replay's own choice (`kvidx replay --decode-threads auto`).
ReplayRate replay_rate(const std::string& path, bool from_stdin, std::optional<std::size_t> decode_threads,
                       std::size_t lanes, std::uint64_t events) {
  LaneIndexer indexer(lanes);
  ReplayOptions ro;
  ro.events_path = from_stdin ? "-" : path;
  ro.lanes = lanes;
  ro.bad_lines = BadLinePolicy::stop;
  ro.decode_threads = decode_threads;
  ReplaySummary summary;
  if (from_stdin) {
    testing::StdinFromFile feed(path);
    summary = replay_event_log(indexer, ro);
  } else {
    summary = replay_event_log(indexer, ro);
  }
  if (!summary.ok()) throw std::runtime_error(summary.error);
  if (summary.read.events != events) throw std::runtime_error("replay read a different number of events");
  return {summary.events_per_second(), summary.decode_threads};
}

}  // namespace

int run_replay_log(const ReplayLogArgs& args, Report& report) {
  const bool keep = !args.keep_dir.empty();
  const std::filesystem::path dir =
      keep ? std::filesystem::path(args.keep_dir) : std::filesystem::temp_directory_path();
  const std::string stem = "kvidx-bench-log-" + std::to_string(::getpid());
  const std::string plain = (dir / (stem + ".jsonl")).string();
  const std::string gzip = (dir / (stem + ".jsonl.gz")).string();
  try {
    const auto bytes = write_log(plain, args.events, args.blocks, args.streams);
    const auto gz_bytes = write_log(gzip, args.events, args.blocks, args.streams);
    const auto flush_start = Clock::now();
    flush_to_disk(plain);
    flush_to_disk(gzip);
    const double flush_s = seconds_since(flush_start);
    std::printf(
        "## replay log: %zu events of %zu blocks over %zu streams, %.2f GiB (gzip %.2f GiB, both flushed to disk "
        "in %.1f s before timing), %zu lanes; load %s\n",
        args.events, args.blocks, args.streams, static_cast<double>(bytes) / (1 << 30),
        static_cast<double>(gz_bytes) / (1 << 30), flush_s, args.lanes, load_average().c_str());
    std::fflush(stdout);
    report.extra()["log"] = {{"events", args.events}, {"blocks", args.blocks},  {"streams", args.streams},
                             {"bytes", bytes},        {"gzip_bytes", gz_bytes}, {"lanes", args.lanes}};
    for (const bool from_stdin : {false, true}) {
      for (const bool gz : {false, true}) {
        const std::string& path = gz ? gzip : plain;
        const std::string label = std::string("replay ") + std::to_string(args.blocks) + "-block log, " +
                                  (gz ? "gzip" : "plain") + (from_stdin ? ", stdin" : ", file");
        // The headline is `kvidx replay`'s own choice (it looks at the input's first bytes, a
        // file's or stdin's); the other column is the setting it did not choose.
        const ReplayRate chosen = replay_rate(path, from_stdin, args.decode_threads, args.lanes, args.events);
        const std::size_t other = chosen.decode_threads == 0 ? 2 : 0;
        const std::string other_name = other == 0 ? "decode on the applying thread" : "2 decode threads";
        const double alternative = replay_rate(path, from_stdin, other, args.lanes, args.events).events_per_second;
        std::printf("## %s: %.0f events/s with %zu decode threads (%s: %.0f); load %s\n", label.c_str(),
                    chosen.events_per_second, chosen.decode_threads, other_name.c_str(), alternative,
                    load_average().c_str());
        std::fflush(stdout);
        report.add(Row{label, "events/s", true, chosen.events_per_second, {{other_name, alternative}}});
      }
    }
  } catch (const std::exception& e) {
    if (!keep) {
      std::filesystem::remove(plain);
      std::filesystem::remove(gzip);
    }
    std::fprintf(stderr, "kvidx-bench replay: %s\n", e.what());
    return 1;
  }
  if (keep) {
    std::printf("## replay log kept: %s, %s\n", plain.c_str(), gzip.c_str());
    return 0;
  }
  std::filesystem::remove(plain);
  std::filesystem::remove(gzip);
  return 0;
}

}  // namespace kvidx::bench
