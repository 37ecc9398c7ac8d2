// The index digest replicas compare (libindexer/index_digest.h): equal for the same holdings
// whatever the order of application or the tree's node boundaries, different when one block, one
// name or one holder differs.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "libindexer/index_digest.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"
#include "tests/support/event_histories.h"

using namespace kvidx;
using namespace kvidx::testing;

namespace {

IndexDigest digest_after(const std::vector<const RouterEvent*>& events, std::size_t lanes = 1) {
  LaneIndexer index(lanes);
  for (const RouterEvent* e : events) REQUIRE(index.enqueue_event(*e) == IndexerStatus::ok);
  auto dump = index.dump_events();
  REQUIRE(dump.has_value());
  return digest_of(*dump);
}

}  // namespace

TEST_CASE("index digest: the same holdings give the same digest whatever the interleaving and the lanes") {
  const Histories histories = branching_histories(5, 2, 40, 7);
  const auto round_robin = interleave(histories);
  // Stream after stream instead of round-robin: each stream's order kept, the tree built differently.
  std::vector<const RouterEvent*> by_stream;
  for (const auto& [stream, events] : histories) {
    for (const RouterEvent& e : events) by_stream.push_back(&e);
  }
  std::reverse(by_stream.begin(), by_stream.end());
  std::stable_sort(by_stream.begin(), by_stream.end(), [](const RouterEvent* a, const RouterEvent* b) {
    return std::make_pair(a->stream(), a->event.event_id) < std::make_pair(b->stream(), b->event.event_id);
  });
  const IndexDigest a = digest_after(round_robin);
  const IndexDigest b = digest_after(by_stream, 3);
  CHECK(a.total == b.total);
  CHECK(a.blocks == b.blocks);
  REQUIRE(a.streams.size() == 10);
  REQUIRE(b.streams.size() == 10);
  for (std::size_t i = 0; i < a.streams.size(); ++i) {
    CHECK(a.streams[i].stream == b.streams[i].stream);
    CHECK(a.streams[i].digest == b.streams[i].digest);
    CHECK(a.streams[i].blocks == b.streams[i].blocks);
  }
  CHECK(digest_hex(a.total).size() == 16);
}

TEST_CASE("index digest: one chain stored in one event or in pieces digests the same, one block more differs") {
  LaneIndexer whole(1);
  REQUIRE(whole.enqueue_event(make_store_event(1, {1, 2, 3, 4})) == IndexerStatus::ok);
  LaneIndexer pieces(1);
  RouterEvent head = make_store_event(1, {1, 2});
  RouterEvent tail = make_store_event_with_parent(1, {1, 2}, {3, 4});
  tail.event.event_id = 1;
  REQUIRE(pieces.enqueue_event(head) == IndexerStatus::ok);
  REQUIRE(pieces.enqueue_event(tail) == IndexerStatus::ok);
  const IndexDigest w = digest_of(*whole.dump_events());
  const IndexDigest p = digest_of(*pieces.dump_events());
  CHECK(w.total == p.total);
  CHECK(w.blocks == 4);

  RouterEvent more = make_store_event_with_parent(1, {1, 2, 3, 4}, {5});
  more.event.event_id = 2;
  REQUIRE(pieces.enqueue_event(more) == IndexerStatus::ok);
  CHECK(digest_of(*pieces.dump_events()).total != w.total);

  // The same blocks held by another rank, or by another worker: other digests.
  LaneIndexer rank1(1);
  REQUIRE(rank1.enqueue_event(make_store_event_with_dp_rank(1, {1, 2, 3, 4}, 1)) == IndexerStatus::ok);
  LaneIndexer worker2(1);
  REQUIRE(worker2.enqueue_event(make_store_event(2, {1, 2, 3, 4})) == IndexerStatus::ok);
  CHECK(digest_of(*rank1.dump_events()).total != w.total);
  CHECK(digest_of(*worker2.dump_events()).total != w.total);
  CHECK(digest_of(*rank1.dump_events()).total != digest_of(*worker2.dump_events()).total);
}

TEST_CASE("index digest: a stream's part is keyed by (worker, rank, tier), an empty index digests to 0") {
  CHECK(digest_of({}).total == 0);
  CHECK(digest_of({}).streams.empty());
  RouterEvent device = make_store_event(1, {1, 2});
  RouterEvent host = device;
  host.storage_tier = StorageTier::host_pinned;
  const IndexDigest both = digest_of(std::vector<RouterEvent>{device, host});
  REQUIRE(both.streams.size() == 2);
  CHECK(both.streams[0].tier == StorageTier::device);
  CHECK(both.streams[1].tier == StorageTier::host_pinned);
  CHECK(both.streams[0].digest == both.streams[1].digest);  // same blocks, separate keys
  CHECK(both.total != digest_of(std::vector<RouterEvent>{device}).total);
}
