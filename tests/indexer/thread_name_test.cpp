// Thread names: what `top -H` and perf show for kvidx's threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>

#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/thread_name.h"
#include "tests/support/thread_names.h"

using namespace kvidx;

using testing::thread_names;

TEST_CASE("name_this_thread names the calling thread and cuts a long name to 15 bytes") {
  std::string short_name;
  std::string long_name;
  std::thread([&] {
    name_this_thread("kvidx-test");
    short_name = this_thread_name();
    name_this_thread("kvidx-a-name-longer-than-fifteen");
    long_name = this_thread_name();
  }).join();
  CHECK(short_name == "kvidx-test");
  CHECK(long_name == "kvidx-a-name-lo");
  CHECK(long_name.size() == kThreadNameBytes);
}

TEST_CASE("each lane of a LaneIndexer names its thread kvidx-lane-N") {
  LaneIndexer indexer(3);
  // NOTE: a lane names itself before it runs; flush() returning means every lane ran, so the names
  // are there now.
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  const auto names = thread_names();
  const std::set<std::string> expected{"kvidx-lane-0", "kvidx-lane-1", "kvidx-lane-2"};
  CHECK(std::includes(names.begin(), names.end(), expected.begin(), expected.end()));
  CHECK(names.count("kvidx-lane-3") == 0);
}
