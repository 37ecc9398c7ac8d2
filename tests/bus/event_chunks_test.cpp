// EventChunker / split_event_to_fit: the encoding step shared by snapshots and dumps handles any
// tree, however long one edge is (no NATS here: the bodies are checked directly).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "libbus/event_chunks.h"
#include "libcodec/event_codec.h"
#include "libindexer/lanes/lane_indexer.h"
#include "tests/support/event_builders.h"
#include "tests/support/event_histories.h"

using namespace kvidx;
using namespace kvidx::bus;
using kvidx::testing::normal_form;

namespace {

std::size_t line_bytes(const RouterEvent& e) { return encode_router_event(e).size() + 1; }

// The tree (as its dump's normal form) after applying `events` in order on one lane.
std::set<testing::BlockKey> replayed(const std::vector<RouterEvent>& events) {
  LaneIndexer indexer(1);
  for (const auto& e : events) REQUIRE(indexer.enqueue_event(e) == IndexerStatus::ok);
  auto dump = indexer.dump_events();
  REQUIRE(dump.has_value());
  return normal_form(*dump);
}

}  // namespace

TEST_CASE("event chunks: a 30000-block edge splits into chained events that each fit and replay to the same tree") {
  const auto chain = testing::make_long_chain(7, 1, 30000, 100);
  LaneIndexer tree(1);
  for (const auto& e : chain) REQUIRE(tree.enqueue_event(e) == IndexerStatus::ok);
  auto dump = tree.dump_events();
  REQUIRE(dump.has_value());
  REQUIRE(dump->size() == 1);  // the chain is one edge: one Stored event of 30,000 blocks
  const RouterEvent& edge = dump->front();
  const std::size_t limit = chunk_body_limit(1 << 20);
  REQUIRE(line_bytes(edge) > limit);  // the case that used to fail every snapshot

  auto pieces = split_event_to_fit(edge, limit);
  REQUIRE_MESSAGE(pieces.ok(), pieces.error().message);
  REQUIRE(pieces.value().size() >= 2);
  std::vector<StoredBlock> blocks;
  std::optional<ExternalSequenceBlockHash> expected_parent = std::get<KvCacheStoreData>(edge.event.data).parent_hash;
  for (const RouterEvent& piece : pieces.value()) {
    CHECK(line_bytes(piece) <= limit);
    CHECK(piece.worker_id == 7);
    CHECK(piece.event.dp_rank == 1);
    const auto& stored = std::get<KvCacheStoreData>(piece.event.data);
    CHECK(stored.parent_hash == expected_parent);  // each piece hangs off the previous one's last block
    expected_parent = stored.blocks.back().block_hash;
    blocks.insert(blocks.end(), stored.blocks.begin(), stored.blocks.end());
  }
  CHECK(blocks == std::get<KvCacheStoreData>(edge.event.data).blocks);
  CHECK(replayed(pieces.value()) == normal_form(*dump));
}

TEST_CASE(
    "event chunks: the chunker packs a tree with a long edge into bodies under the limit that decode to the same "
    "tree") {
  // A 30000-block chain shared by two ranks, a branch off its middle and 50 small streams.
  std::vector<RouterEvent> history = testing::make_long_chain(3, 0, 30000, 250);
  for (auto e : testing::make_long_chain(3, 0, 30000, 250)) {
    e.event.dp_rank = 1;
    history.push_back(std::move(e));
  }
  {
    const auto& middle = std::get<KvCacheStoreData>(history[60].event.data).blocks.back().block_hash;
    KvCacheStoreData branch;
    branch.parent_hash = middle;
    for (std::uint64_t i = 1; i <= 40; ++i) {
      branch.blocks.push_back(StoredBlock{ExternalSequenceBlockHash{i * 1000003}, LocalBlockHash{i}});
    }
    history.push_back(RouterEvent{3, KvCacheEvent{200, std::move(branch), 0}, std::nullopt});
  }
  for (WorkerId w = 100; w < 150; ++w) history.push_back(testing::make_store_event(w, {1, 2, w}));
  LaneIndexer tree(2);
  for (const auto& e : history) REQUIRE(tree.enqueue_event(e) == IndexerStatus::ok);
  auto dump = tree.dump_events();
  REQUIRE(dump.has_value());

  const std::size_t limit = 64 * 1024;
  std::vector<std::string> bodies;
  EventChunker chunker(limit, [&](std::string_view body) -> BusStatus {
    bodies.emplace_back(body);
    return {};
  });
  for (const auto& e : *dump) REQUIRE(chunker.add(e).ok());
  REQUIRE(chunker.finish().ok());
  CHECK(chunker.chunks() == bodies.size());
  CHECK(chunker.split_events() >= 2);  // both ranks' long edges (the branch splits the chain in two)

  std::vector<RouterEvent> decoded;
  for (const std::string& body : bodies) {
    CHECK(body.size() <= limit);
    std::string_view rest = body;
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      REQUIRE(nl != std::string_view::npos);  // every line is whole within its body
      auto e = decode_router_event(rest.substr(0, nl));
      REQUIRE_MESSAGE(e.ok(), e.error().message());
      decoded.push_back(std::move(e).value());
      rest = rest.substr(nl + 1);
    }
  }
  CHECK(decoded.size() == chunker.lines());
  for (std::size_t i = 0; i < decoded.size(); ++i) CHECK(decoded[i].event.event_id == i);  // renumbered in order
  CHECK(normal_form(decoded) == normal_form(*dump));
  CHECK(replayed(decoded) == normal_form(*dump));
}

TEST_CASE("event chunks: a split stored event keeps each block's mm_extra_info with its block") {
  std::vector<std::uint64_t> hashes;
  for (std::uint64_t i = 1; i <= 600; ++i) hashes.push_back(i);
  RouterEvent stored = testing::make_store_event(3, hashes);
  auto& data = std::get<KvCacheStoreData>(stored.event.data);
  const std::vector<std::size_t> with_info{0, 299, 599};
  for (const std::size_t b : with_info) data.set_mm_extra_info(b, fmt::format(R"({{"mm_hashes":[{}]}})", b));
  auto pieces = split_event_to_fit(stored, 4096);
  REQUIRE_MESSAGE(pieces.ok(), pieces.error().message);
  REQUIRE(pieces.value().size() > 3);
  std::size_t offset = 0;
  for (const auto& piece : pieces.value()) {
    const auto& run = std::get<KvCacheStoreData>(piece.event.data);
    bool any = false;
    for (std::size_t i = 0; i < run.blocks.size(); ++i) {
      const std::string* want = data.mm_extra_info(offset + i);
      const std::string* got = run.mm_extra_info(i);
      REQUIRE((want == nullptr) == (got == nullptr));
      if (want != nullptr) CHECK(*got == *want);
      any = any || want != nullptr;
    }
    // A run without metadata keeps none (equal to a decoded one).
    CHECK(run.mm_extra_infos.size() == (any ? run.blocks.size() : 0));
    offset += run.blocks.size();
  }
  CHECK(offset == hashes.size());
}

TEST_CASE(
    "event chunks: a long removed event splits into runs of its hashes, a block larger than the limit is an error") {
  std::vector<ExternalSequenceBlockHash> hashes;
  for (std::uint64_t i = 0; i < 5000; ++i) hashes.push_back(ExternalSequenceBlockHash{0x9E3779B97F4A7C15ull * (i + 1)});
  const RouterEvent removal = testing::remove_event(9, 4, 2, hashes);
  auto pieces = split_event_to_fit(removal, 4096);
  REQUIRE_MESSAGE(pieces.ok(), pieces.error().message);
  std::vector<ExternalSequenceBlockHash> joined;
  for (const auto& piece : pieces.value()) {
    CHECK(line_bytes(piece) <= 4096);
    CHECK(piece.event.event_id == 4);
    const auto& data = std::get<KvCacheRemoveData>(piece.event.data);
    joined.insert(joined.end(), data.block_hashes.begin(), data.block_hashes.end());
  }
  CHECK(joined == hashes);

  RouterEvent huge = testing::make_store_event(1, {1, 2});
  std::get<KvCacheStoreData>(huge.event.data)
      .set_mm_extra_info(1, R"({"mm_objects":[{"mm_hash":1,"offsets":[)" + std::string(3000, '1') + "]}]}");
  auto refused = split_event_to_fit(huge, 1024);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("more than the chunk limit of 1024 bytes") != std::string::npos);
}
