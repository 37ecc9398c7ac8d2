// kvidx-bench replay: the Mooncake-derived event log (written once to a temp file as JSON Lines)
// replayed offline: kvidx through replay_event_log (decode + sticky lanes, as `kvidx replay`),
// the baselines through the same reader and decoder into their lanes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "bench/app/commands.h"
#include "bench/common/report.h"
#include "libindexer/lanes/lane_indexer.h"
#include "replay/event_log_reader.h"
#include "replay/event_log_writer.h"
#include "replay/mooncake_workload.h"
#include "replay/offline_replay.h"

namespace kvidx::bench {

int run_replay(const ReplayArgs& args) {
  std::vector<MooncakeRequest> trace;
  std::string error;
  if (!load_mooncake_trace(args.trace, trace, error)) {
    std::fprintf(stderr, "kvidx-bench replay: %s\n", error.c_str());
    return 1;
  }
  if (args.max_requests > 0 && trace.size() > args.max_requests) trace.resize(args.max_requests);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvidx-bench-replay-" + std::to_string(::getpid()) + ".jsonl"))
          .string();
  WorkloadOptions options;
  options.workers = args.workers;
  options.copies = args.copies;
  options.capacity_blocks = args.capacity_blocks;
  options.store_chunk_blocks = args.store_chunk_blocks;
  std::uint64_t events = 0;
  {
    EventLogWriter writer(path);
    if (!writer.ok()) {
      std::fprintf(stderr, "kvidx-bench replay: %s\n", writer.error().c_str());
      return 1;
    }
    WorkloadSink sink;
    sink.on_event = [&](RouterEvent&& e) {
      writer.write(e);
      ++events;
    };
    simulate_workload(trace, options, sink);
    if (!writer.close()) {
      std::fprintf(stderr, "kvidx-bench replay: %s\n", writer.error().c_str());
      return 1;
    }
  }
  const auto bytes = std::filesystem::file_size(path);
  std::printf("## replay: Mooncake-derived log, %llu events, %.1f MiB, %zu lanes; load %s\n",
              static_cast<unsigned long long>(events), static_cast<double>(bytes) / (1024.0 * 1024.0), args.lanes,
              load_average().c_str());

  Report report("replay");
  report.extra()["workload"] = {{"events", events}, {"bytes", bytes}, {"lanes", args.lanes}};
  Row secs{"replay Mooncake-derived log (decode + apply)", "s", false, 0, {}};
  Row rate{"replay Mooncake-derived log (decode + apply)", "events/s", true, 0, {}};
  int status = 0;
  for (const EngineKind kind : args.common.engine_kinds()) {
    double seconds = 0;
    if (kind == EngineKind::kvidx) {
      LaneIndexer indexer(args.lanes);
      ReplayOptions ro;
      ro.events_path = path;
      ro.lanes = args.lanes;
      const auto summary = replay_event_log(indexer, ro);
      if (!summary.ok()) {
        std::fprintf(stderr, "kvidx-bench replay: %s\n", summary.error.c_str());
        status = 1;
      }
      seconds = summary.seconds;
    } else {
      auto engine = make_engine(kind, args.lanes);
      const auto t0 = Clock::now();
      const auto read = read_event_log(path, BadLinePolicy::stop,
                                       [&](EventLogLine&& line) { engine->enqueue(std::move(line.event)); });
      engine->flush();
      seconds = seconds_since(t0);
      if (!read.ok()) {
        std::fprintf(stderr, "kvidx-bench replay: %s\n", read.error.c_str());
        status = 1;
      }
    }
    const double per_s = static_cast<double>(events) / seconds;
    if (kind == EngineKind::kvidx) {
      secs.kvidx = seconds;
      rate.kvidx = per_s;
    } else {
      secs.baselines.emplace_back(engine_name(kind), seconds);
      rate.baselines.emplace_back(engine_name(kind), per_s);
    }
  }
  std::filesystem::remove(path);
  report.add(std::move(secs));
  report.add(std::move(rate));
  if (args.log.events > 0) {
    ReplayLogArgs log = args.log;
    log.lanes = args.lanes;
    if (run_replay_log(log, report) != 0) status = 1;
  }
  report.print();
  return report.write_json(args.common.json_dir) ? status : 1;
}

}  // namespace kvidx::bench
