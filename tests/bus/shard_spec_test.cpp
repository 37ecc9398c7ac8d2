// --shard I/N parsing, NATS's partition function as kvidx computes it, and a shard's subjects
// (libbus/shard_spec.h, libbus/subjects.h).
#include <doctest/doctest.h>

#include "libbus/shard_spec.h"
#include "libbus/subjects.h"

using namespace kvidx;
using namespace kvidx::bus;

TEST_SUITE("bus") {

TEST_CASE("--shard I/N: valid values, and errors that say what is wrong") {
  auto ok = parse_shard_spec("2/3");
  REQUIRE(ok.ok());
  CHECK(ok.value() == ShardSpec{2, 3});
  CHECK(to_string(ok.value()) == "2/3");
  CHECK(parse_shard_spec("0/1").ok());
  const std::pair<const char*, const char*> bad[] = {
      {"3/3", "--shard 3/3: the shard index must be below the shard count (0 .. 2)"},
      {"0/0", "--shard 0/0: the shard count N must be at least 1"},
      {"x", "--shard x: expected I/N"},
      {"", "--shard : expected I/N"},
      {"1/", "--shard 1/: I and N must be non-negative integers"},
      {"-1/3", "--shard -1/3: I and N must be non-negative integers"},
      {"1/3/4", "--shard 1/3/4: I and N must be non-negative integers"},
      {" 1/3", "--shard  1/3: I and N must be non-negative integers"},
      {"0/5000", "--shard 0/5000: at most 1024 shards"},
  };
  for (const auto& [text, reason] : bad) {
    auto parsed = parse_shard_spec(text);
    REQUIRE_FALSE(parsed.ok());
    INFO(text);
    CHECK(parsed.error().message.find(reason) == 0);
  }
}

TEST_CASE("shard_of_worker is nats-server's partition(3,1) of the worker id token") {
  // Observed from nats-server 2.9.10 with mappings = { "kv.events.*":
  // "kv.events.{{partition(3,1)}}.{{wildcard(1)}}" }: kv.events.<w> arrived as kv.events.<p>.<w>.
  const std::pair<WorkerId, std::uint32_t> observed[] = {
      {0, 0}, {1, 1}, {2, 1}, {3, 2},  {4, 1},  {5, 2},    {6, 2},
      {7, 0}, {8, 1}, {9, 2}, {10, 0}, {42, 2}, {1000, 1}, {18446744073709551615ULL, 2}};
  for (const auto& [worker, partition] : observed) {
    INFO(worker);
    CHECK(shard_of_worker(worker, 3) == partition);
  }
  CHECK(shard_of_worker(12345, 1) == 0);
  CHECK(shard_mapping_config("kv", 3) ==
        R"(mappings = { "kv.events.*": "kv.events.{{partition(3,1)}}.{{wildcard(1)}}" })");
}

TEST_CASE("a shard's subjects: events filter, queries and admin under kv.shard.I, snapshots in their own layout") {
  const Subjects plain("kv");
  const Subjects shard("kv", ShardSpec{1, 3});
  // Unsharded: unchanged.
  CHECK(plain.events_filter() == "kv.events.>");
  CHECK(plain.query_scores() == "kv.query.scores");
  CHECK(plain.admin_stats() == "kv.admin.stats");
  CHECK(plain.snapshot_commit("a") == "kv.snapshots.a.commit");
  // Shard 1 of 3.
  CHECK(shard.events_filter() == "kv.events.1.*");
  CHECK(shard.query_scores() == "kv.shard.1.query.scores");
  CHECK(shard.shard_query_scores(2) == "kv.shard.2.query.scores");
  CHECK(shard.admin_stats() == "kv.shard.1.admin.stats");
  CHECK(shard.admin_workers() == "kv.shard.1.admin.workers");
  CHECK(shard.admin_dump() == "kv.shard.1.admin.dump");
  CHECK(shard.admin_wildcard() == "kv.shard.1.admin.*");
  CHECK(shard.admin_remove_worker() == "kv.admin.remove_worker");  // every replica of every shard
  CHECK(shard.admin_replicas() == "kv.admin.replicas");
  CHECK(shard.snapshot_commit("a") == "kv.snapshots.shard-1-of-3.a.commit");
  CHECK(shard.snapshot_commit("*") == "kv.snapshots.shard-1-of-3.*.commit");
  // The mapped subjects.
  CHECK(shard.worker_from_shard_events_subject("kv.events.1.42") == WorkerId{42});
  CHECK_FALSE(shard.worker_from_shard_events_subject("kv.events.2.42").has_value());
  CHECK_FALSE(shard.worker_from_shard_events_subject("kv.events.42").has_value());
  CHECK_FALSE(plain.worker_from_shard_events_subject("kv.events.1.42").has_value());
  CHECK(plain.worker_from_partitioned_events_subject("kv.events.0.7") == WorkerId{7});
  CHECK_FALSE(plain.worker_from_partitioned_events_subject("kv.events.7").has_value());
  CHECK_FALSE(plain.worker_from_partitioned_events_subject("kv.events.x.7").has_value());
  CHECK_FALSE(plain.worker_from_partitioned_events_subject("kv.events.0.7.1").has_value());
  CHECK_FALSE(plain.worker_from_partitioned_events_subject("kv.events..7").has_value());
}

}  // TEST_SUITE("bus")
