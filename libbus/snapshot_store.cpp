#include "libbus/snapshot_store.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <string_view>

#include "libbus/codec/event_codec.h"

namespace kvidx::bus {
namespace {

using Json = nlohmann::json;
constexpr const char* kSnapshotIdHeader = "Kvidx-Snapshot-Id";

std::string new_snapshot_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::random_device rd;
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()) + "-" +
         std::to_string(rd());
}

BusError format_error(const std::string& what) { return BusError{NATS_ERR, "snapshot: " + what}; }

}  // namespace

SnapshotStore::SnapshotStore(JetStream& js, Subjects subjects, std::string stream, std::string name,
                             std::int64_t max_payload)
    : js_(js), subjects_(std::move(subjects)), stream_(std::move(stream)), name_(std::move(name)),
      max_payload_(max_payload) {}

BusStatus SnapshotStore::ensure_stream() {
  auto state = js_.ensure_stream({stream_, {subjects_.snapshots_wildcard()}, true, 0, 0});
  if (!state.ok()) return state.error();
  return {};
}

BusResult<std::uint64_t> SnapshotStore::write(const IndexSnapshot& snapshot) {
  const std::string id = snapshot.id.empty() ? new_snapshot_id() : snapshot.id;
  const std::string data_subject = subjects_.snapshot_data(name_);
  // NOTE: leave room for headers and protocol overhead under the server's max payload.
  const std::size_t limit = static_cast<std::size_t>(std::max<std::int64_t>(max_payload_ - 4096, 4096));
  std::uint64_t first_chunk = 0;
  std::uint64_t last_chunk = 0;
  std::size_t chunks = 0;
  std::string body;
  auto flush_chunk = [&]() -> BusStatus {
    auto msg = Message::create(data_subject, body);
    if (!msg.ok()) return msg.error();
    if (auto s = msg.value().set_header(kSnapshotIdHeader, id.c_str()); !s.ok()) return s;
    auto ack = js_.publish(msg.value());
    if (!ack.ok()) return ack.error();
    if (first_chunk == 0) first_chunk = ack.value().sequence;
    last_chunk = ack.value().sequence;
    ++chunks;
    body.clear();
    return {};
  };
  std::string line;
  for (const RouterEvent& event : snapshot.events) {
    line.clear();
    append_router_event(line, event);
    line += '\n';
    if (line.size() > limit) return format_error("one event exceeds the chunk limit");
    if (body.size() + line.size() > limit) {
      if (auto s = flush_chunk(); !s.ok()) return s.error();
    }
    body += line;
  }
  if (!body.empty() || chunks == 0) {
    if (auto s = flush_chunk(); !s.ok()) return s.error();
  }
  Json marks = Json::array();
  for (const auto& [stream, event_id] : snapshot.watermarks) {
    marks.push_back(Json::array({stream.worker_id, stream.dp_rank, event_id}));
  }
  const Json commit{{"id", id},
                    {"stream_sequence", snapshot.stream_sequence},
                    {"first_chunk", first_chunk},
                    {"last_chunk", last_chunk},
                    {"chunks", chunks},
                    {"events", snapshot.events.size()},
                    {"watermarks", std::move(marks)}};
  auto ack = js_.publish(subjects_.snapshot_commit(name_), commit.dump());
  if (!ack.ok()) return ack.error();
  // Older snapshots are garbage now; failures here only cost space.
  if (auto s = js_.purge(stream_, data_subject, chunks); !s.ok()) spdlog::warn("{}", s.error().message);
  if (auto s = js_.purge(stream_, subjects_.snapshot_commit(name_), 1); !s.ok()) {
    spdlog::warn("{}", s.error().message);
  }
  return ack.value().sequence;
}

BusResult<std::optional<IndexSnapshot>> SnapshotStore::load_latest() {
  auto commit_msg = js_.get_last_message(stream_, subjects_.snapshot_commit(name_));
  if (!commit_msg.ok()) {
    if (commit_msg.error().status == NATS_NOT_FOUND) return std::optional<IndexSnapshot>{};
    return commit_msg.error();
  }
  IndexSnapshot snapshot;
  std::uint64_t first_chunk = 0;
  std::uint64_t last_chunk = 0;
  std::size_t expected_events = 0;
  try {
    const Json commit = Json::parse(commit_msg.value().data());
    snapshot.id = commit.at("id").get<std::string>();
    snapshot.stream_sequence = commit.at("stream_sequence").get<std::uint64_t>();
    first_chunk = commit.at("first_chunk").get<std::uint64_t>();
    last_chunk = commit.at("last_chunk").get<std::uint64_t>();
    expected_events = commit.at("events").get<std::size_t>();
    for (const Json& mark : commit.at("watermarks")) {
      snapshot.watermarks.emplace_back(
          WorkerWithDpRank{mark.at(0).get<WorkerId>(), mark.at(1).get<DpRank>()}, mark.at(2).get<std::uint64_t>());
    }
  } catch (const std::exception& e) {
    return format_error(std::string("bad commit record: ") + e.what());
  }
  snapshot.events.reserve(expected_events);
  for (std::uint64_t seq = first_chunk; seq != 0 && seq <= last_chunk; ++seq) {
    auto chunk = js_.get_message(stream_, seq);
    if (!chunk.ok()) return chunk.error();
    if (chunk.value().header(kSnapshotIdHeader) != snapshot.id) continue;  // interleaved writer
    std::string_view rest = chunk.value().data();
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      if (line.empty()) continue;
      auto event = decode_router_event(line);
      if (!event.ok()) return format_error("bad event in chunk " + std::to_string(seq) + ": " + event.error().message());
      snapshot.events.push_back(std::move(event).value());
    }
  }
  if (snapshot.events.size() != expected_events) {
    return format_error("snapshot " + snapshot.id + " has " + std::to_string(snapshot.events.size()) +
                        " events, commit says " + std::to_string(expected_events));
  }
  return std::optional<IndexSnapshot>(std::move(snapshot));
}

}  // namespace kvidx::bus
