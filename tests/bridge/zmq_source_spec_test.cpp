// The `kvidx serve --zmq SPEC` text form of an in-process ZMQ source.
#include "bridge/zmq_source_spec.h"

#include <doctest/doctest.h>

using namespace kvidx;
using namespace kvidx::bridge;

TEST_CASE("a_zmq_source_spec_sets_every_option_it_names") {
  auto parsed = parse_zmq_source_spec(
      "tcp://127.0.0.1:5557,worker=3,block-size=16,replay=tcp://127.0.0.1:5558,dp-rank=2,topic=kv,eagle,"
      "clear_on_gap=true,replay-timeout-ms=500,cache-namespace=tenant");
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
  const ZmqBridgeConfig& c = parsed.value();
  CHECK(c.endpoint == "tcp://127.0.0.1:5557");
  CHECK(c.replay_endpoint == "tcp://127.0.0.1:5558");
  CHECK(c.conversion.worker_id == 3);
  CHECK(c.conversion.block_size == 16);
  CHECK(c.conversion.default_dp_rank == 2);
  CHECK(c.topic == "kv");
  CHECK(c.conversion.eagle);
  CHECK(c.clear_on_gap);
  CHECK(c.replay_timeout == std::chrono::milliseconds(500));
  CHECK(c.conversion.cache_namespace == "tenant");

  auto minimal = parse_zmq_source_spec("ipc:///tmp/engine.sock,block-size=4,worker=18446744073709551615");
  REQUIRE(minimal.ok());
  CHECK(minimal.value().conversion.worker_id == 18446744073709551615ULL);
  CHECK(minimal.value().replay_endpoint.empty());
  CHECK_FALSE(minimal.value().conversion.eagle);
  CHECK(describe_zmq_source(minimal.value()) ==
        "ipc:///tmp/engine.sock as worker 18446744073709551615 rank 0, block size 4");
}

TEST_CASE("a_bad_zmq_source_spec_is_an_error_naming_the_option") {
  struct Case {
    const char* spec;
    const char* field;
  };
  const Case cases[] = {
      {"worker=3,block-size=16", "endpoint"},
      {"tcp://h:1,block-size=16", "worker"},
      {"tcp://h:1,worker=3", "block-size"},
      {"tcp://h:1,worker=x,block-size=16", "worker"},
      {"tcp://h:1,worker=-1,block-size=16", "worker"},
      {"tcp://h:1,worker=3,block-size=0", "block-size"},
      {"tcp://h:1,worker=3,block-size=16,worker=4", "worker"},
      {"tcp://h:1,worker=3,block-size=16,replay=h:2", "replay"},
      {"tcp://h:1,worker=3,block-size=16,eagle=maybe", "eagle"},
      {"tcp://h:1,worker=3,block-size=16,topic", "topic"},
      {"tcp://h:1,worker=3,block-size=16,colour=blue", "colour"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    auto parsed = parse_zmq_source_spec(c.spec);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().field == c.field);
  }
}
