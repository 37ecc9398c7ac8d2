// Thread names: what `top -H` and perf show for kvidx's threads.
#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "libindexer/lanes/lane_indexer.h"
#include "libindexer/thread_name.h"
#include "tests/support/thread_names.h"
#include "tests/support/wait_until.h"

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
  REQUIRE(indexer.flush() == IndexerStatus::ok);
  // NOTE: a lane names itself when its thread starts; flush() returning means every lane ran.
  const bool named = testing::wait_until([] {
    const auto names = thread_names();
    return names.count("kvidx-lane-0") == 1 && names.count("kvidx-lane-1") == 1 && names.count("kvidx-lane-2") == 1;
  });
  CHECK(named);
  CHECK(thread_names().count("kvidx-lane-3") == 0);
}
