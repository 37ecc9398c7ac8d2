#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "libindexer/load/active_load.h"

namespace {

using kvidx::ActiveLoad;
using kvidx::ExternalSequenceBlockHash;
using kvidx::LoadStatus;
using kvidx::WorkerWithDpRank;

std::vector<ExternalSequenceBlockHash> seq(const std::vector<std::uint64_t>& values) {
  std::vector<ExternalSequenceBlockHash> hashes;
  for (const auto v : values) hashes.push_back(ExternalSequenceBlockHash{v});
  return hashes;
}

constexpr WorkerWithDpRank kStreamA{1, 0};
constexpr WorkerWithDpRank kStreamB{1, 1};
constexpr WorkerWithDpRank kStreamC{2, 0};

}  // namespace

TEST_CASE("admit_and_finish_report_new_and_released_positions") {
  ActiveLoad load;
  const auto first = load.admit(kStreamA, "r1", seq({1, 2, 3}));
  CHECK(first.status == LoadStatus::ok);
  CHECK(first.first_new_position == std::optional<std::size_t>{0});

  const auto second = load.admit(kStreamA, "r2", seq({1, 2, 4, 5}));
  CHECK(second.status == LoadStatus::ok);
  CHECK(second.first_new_position == std::optional<std::size_t>{2});
  CHECK(load.active_blocks(kStreamA) == 5);
  CHECK(load.live_requests() == 2);

  const auto done_first = load.finish("r1");
  CHECK(done_first.status == LoadStatus::ok);
  CHECK(done_first.stream == kStreamA);
  REQUIRE(done_first.released.has_value());
  CHECK(done_first.released->path == seq({1, 2, 3}));
  CHECK(done_first.released->remove_from == 2);
  CHECK(load.active_blocks(kStreamA) == 4);

  const auto done_second = load.finish("r2");
  REQUIRE(done_second.released.has_value());
  CHECK(done_second.released->remove_from == 0);
  CHECK(load.active_blocks(kStreamA) == 0);
  CHECK(load.live_requests() == 0);
}

TEST_CASE("identical_prompts_share_blocks_within_a_stream_but_not_across_streams") {
  ActiveLoad load;
  REQUIRE(load.admit(kStreamA, "a1", seq({1, 2, 3})).status == LoadStatus::ok);
  CHECK(load.admit(kStreamA, "a2", seq({1, 2, 3})).first_new_position == std::nullopt);
  // Another rank of the same worker is its own stream: the same prompt is new there.
  CHECK(load.admit(kStreamB, "b1", seq({1, 2, 3})).first_new_position == std::optional<std::size_t>{0});
  CHECK(load.active_blocks(kStreamA) == 3);
  CHECK(load.active_blocks(kStreamB) == 3);

  CHECK_FALSE(load.finish("a1").released.has_value());
  CHECK(load.active_blocks(kStreamA) == 3);
  CHECK(load.finish("a2").released.has_value());
  CHECK(load.active_blocks(kStreamA) == 0);
  CHECK(load.active_blocks(kStreamB) == 3);
}

TEST_CASE("unknown_request_ids_are_reported_not_fatal") {
  ActiveLoad load;
  CHECK(load.append_output("missing", ExternalSequenceBlockHash{7}) == LoadStatus::unknown_request);
  CHECK(load.set_fraction("missing", 0.5) == LoadStatus::unknown_request);
  const auto finished = load.finish("missing");
  CHECK(finished.status == LoadStatus::unknown_request);
  CHECK_FALSE(finished.released.has_value());

  REQUIRE(load.admit(kStreamA, "r1", seq({1})).status == LoadStatus::ok);
  REQUIRE(load.finish("r1").status == LoadStatus::ok);
  // A second finish of the same request (e.g. a redelivered message) is just unknown now.
  CHECK(load.finish("r1").status == LoadStatus::unknown_request);
  CHECK(load.append_output("r1", ExternalSequenceBlockHash{8}) == LoadStatus::unknown_request);
  CHECK(load.snapshot().empty());
  CHECK(to_string(LoadStatus::unknown_request) == "unknown_request");
}

TEST_CASE("duplicate_request_and_output_block_are_rejected_without_change") {
  ActiveLoad load;
  REQUIRE(load.admit(kStreamA, "r1", seq({1, 2})).status == LoadStatus::ok);
  const auto again = load.admit(kStreamB, "r1", seq({9, 10, 11}));
  CHECK(again.status == LoadStatus::duplicate_request);
  CHECK(load.active_blocks(kStreamB) == 0);
  CHECK(load.snapshot().size() == 1);

  REQUIRE(load.admit(kStreamA, "r2", seq({1, 2})).status == LoadStatus::ok);
  CHECK(load.append_output("r1", ExternalSequenceBlockHash{100}) == LoadStatus::ok);
  CHECK(load.append_output("r2", ExternalSequenceBlockHash{100}) == LoadStatus::duplicate_output_block);
  CHECK(load.active_blocks(kStreamA) == 3);

  CHECK(load.finish("r1").status == LoadStatus::ok);
  CHECK(load.active_blocks(kStreamA) == 2);
  // Once r1's output is gone the hash may be used again.
  CHECK(load.append_output("r2", ExternalSequenceBlockHash{100}) == LoadStatus::ok);
  CHECK(load.active_blocks(kStreamA) == 3);
  CHECK(load.finish("r2").status == LoadStatus::ok);
  CHECK(load.active_blocks(kStreamA) == 0);
}

TEST_CASE("set_fraction_weights_only_the_exclusive_suffix_and_outputs") {
  ActiveLoad load;
  REQUIRE(load.admit(kStreamA, "shared", seq({1, 2})).status == LoadStatus::ok);
  REQUIRE(load.admit(kStreamA, "long", seq({1, 2, 3, 4, 5, 6})).status == LoadStatus::ok);
  REQUIRE(load.append_output("long", ExternalSequenceBlockHash{900}) == LoadStatus::ok);
  REQUIRE(load.append_output("long", ExternalSequenceBlockHash{901}) == LoadStatus::ok);
  CHECK(load.active_blocks(kStreamA) == 8);

  // Exclusive: blocks 3..6 and two outputs = 6 blocks at weight 0.5; the shared {1, 2} stay whole.
  CHECK(load.set_fraction("long", 0.5) == LoadStatus::ok);
  CHECK(load.active_blocks(kStreamA) == 5);
  CHECK(load.set_fraction("long", 0.0) == LoadStatus::ok);
  CHECK(load.active_blocks(kStreamA) == 2);

  for (const double bad :
       {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CHECK(load.set_fraction("long", bad) == LoadStatus::invalid_fraction);
  }
  CHECK(load.active_blocks(kStreamA) == 2);

  CHECK(load.finish("long").released->remove_from == 2);
  CHECK(load.active_blocks(kStreamA) == 2);
  CHECK(load.finish("shared").status == LoadStatus::ok);
  CHECK(load.active_blocks(kStreamA) == 0);
}

TEST_CASE("snapshot_lists_every_stream_with_live_requests") {
  ActiveLoad load;
  REQUIRE(load.admit(kStreamA, "a", seq({1, 2, 3})).status == LoadStatus::ok);
  REQUIRE(load.admit(kStreamB, "b", seq({1, 2})).status == LoadStatus::ok);
  REQUIRE(load.admit(kStreamC, "c", seq({})).status == LoadStatus::ok);
  REQUIRE(load.append_output("c", ExternalSequenceBlockHash{50}) == LoadStatus::ok);

  const auto loads = load.snapshot();
  CHECK(loads.size() == 3);
  CHECK(loads.at(kStreamA) == 3);
  CHECK(loads.at(kStreamB) == 2);
  CHECK(loads.at(kStreamC) == 1);

  REQUIRE(load.finish("b").status == LoadStatus::ok);
  const auto after = load.snapshot();
  CHECK(after.size() == 2);
  CHECK_FALSE(after.contains(kStreamB));
  // An output-only request releases no prompt blocks.
  CHECK_FALSE(load.finish("c").released.has_value());
  CHECK(load.snapshot().size() == 1);
}

TEST_CASE("remove_worker_drops_all_its_ranks_and_their_requests") {
  ActiveLoad load;
  REQUIRE(load.admit(kStreamA, "a1", seq({1, 2})).status == LoadStatus::ok);
  REQUIRE(load.admit(kStreamA, "a2", seq({1, 3})).status == LoadStatus::ok);
  REQUIRE(load.admit(kStreamB, "b1", seq({1, 2})).status == LoadStatus::ok);
  REQUIRE(load.admit(kStreamC, "c1", seq({1, 2})).status == LoadStatus::ok);

  CHECK(load.remove_worker(kStreamA.worker_id) == 3);
  CHECK(load.active_blocks(kStreamA) == 0);
  CHECK(load.active_blocks(kStreamB) == 0);
  CHECK(load.active_blocks(kStreamC) == 2);
  CHECK(load.live_requests() == 1);
  CHECK(load.finish("a1").status == LoadStatus::unknown_request);
  CHECK(load.remove_worker(99) == 0);

  // The worker may come back; its streams start empty.
  const auto readmitted = load.admit(kStreamA, "a1", seq({1, 2}));
  CHECK(readmitted.status == LoadStatus::ok);
  CHECK(readmitted.first_new_position == std::optional<std::size_t>{0});
  CHECK(load.active_blocks(kStreamA) == 2);
}

TEST_CASE("concurrent_admit_and_finish_from_several_threads_drains_to_zero") {
  constexpr int kWriters = 4;
  constexpr int kRequestsPerWriter = 1500;
  constexpr std::size_t kWindow = 4;  // live requests each writer keeps in flight
  const std::vector<WorkerWithDpRank> streams{kStreamA, kStreamB, kStreamC};
  // Prompts share {1, 2, 3} and end in one of seven tails: at most 10 prompt blocks per stream,
  // plus one output per live request.
  constexpr std::size_t kMaxPerStream = 10 + kWriters * kWindow;

  ActiveLoad load;
  std::atomic<int> writers_left{kWriters};
  std::atomic<int> failures{0};

  std::thread reader([&] {
    while (writers_left.load() > 0) {
      for (const auto& [stream, blocks] : load.snapshot()) {
        if (blocks > kMaxPerStream) failures.fetch_add(1);
      }
    }
  });

  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::deque<std::string> in_flight;
      for (int i = 0; i < kRequestsPerWriter; ++i) {
        const auto stream = streams[static_cast<std::size_t>(i) % streams.size()];
        const std::string id = "w" + std::to_string(w) + "-" + std::to_string(i);
        const auto tail = 100 + static_cast<std::uint64_t>((i * 7 + w) % 7);
        if (load.admit(stream, id, seq({1, 2, 3, tail})).status != LoadStatus::ok) failures.fetch_add(1);
        // Our four prompt blocks are live until we finish them. Each weighs at least 0.5: a
        // fraction another writer set stays on an edge our prompt later came to share.
        if (load.active_blocks(stream) < 2) failures.fetch_add(1);
        const auto output =
            (std::uint64_t{1} << 40U) | (static_cast<std::uint64_t>(w) << 20U) | static_cast<std::uint64_t>(i);
        if (load.append_output(id, ExternalSequenceBlockHash{output}) != LoadStatus::ok) failures.fetch_add(1);
        if (i % 3 == 0 && load.set_fraction(id, 0.5) != LoadStatus::ok) failures.fetch_add(1);
        in_flight.push_back(id);
        if (in_flight.size() > kWindow - 1) {
          if (load.finish(in_flight.front()).status != LoadStatus::ok) failures.fetch_add(1);
          in_flight.pop_front();
        }
      }
      for (const auto& id : in_flight) {
        if (load.finish(id).status != LoadStatus::ok) failures.fetch_add(1);
      }
      writers_left.fetch_sub(1);
    });
  }
  for (auto& t : writers) t.join();
  reader.join();

  CHECK(failures.load() == 0);
  CHECK(load.live_requests() == 0);
  CHECK(load.snapshot().empty());
  for (const auto& stream : streams) CHECK(load.active_blocks(stream) == 0);
}
