#include "libbus/snapshot_store.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <string_view>

#include "libbus/event_chunks.h"
#include "libbus/stream_replicas.h"
#include "libcodec/event_codec.h"
#include "libcodec/snapshot_codec.h"

namespace kvidx::bus {
namespace {

constexpr const char* kSnapshotIdHeader = "Kvidx-Snapshot-Id";
constexpr const char* kSnapshotPartHeader = "Kvidx-Snapshot-Part";  // absent: events
constexpr const char* kWatermarksPart = "watermarks";

std::string new_snapshot_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::random_device rd;
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()) + "-" +
         std::to_string(rd());
}

BusError format_error(const std::string& what) { return BusError{NATS_ERR, "snapshot: " + what}; }

}  // namespace

SnapshotStore::SnapshotStore(JetStream& js, Connection& conn, Subjects subjects, std::string stream, std::string name)
    : js_(js), subjects_(std::move(subjects)), stream_(std::move(stream)), name_(std::move(name)), conn_(conn) {}

BusStatus SnapshotStore::ensure_stream(int replicas, std::size_t known_servers) {
  const StreamSpec spec =
      with_replicas({stream_, {subjects_.snapshots_wildcard()}, true, 0, 0}, replicas, known_servers);
  auto state = js_.ensure_stream(spec);
  if (!state.ok()) return state.error();
  log_stream_replicas(spec, state.value(), known_servers);
  return {};
}

BusResult<SnapshotWritten> SnapshotStore::write(const IndexSnapshot& snapshot) {
  const std::string id = snapshot.id.empty() ? new_snapshot_id() : snapshot.id;
  const std::string data_subject = subjects_.snapshot_data(name_);
  std::uint64_t first_chunk = 0;
  std::uint64_t last_chunk = 0;
  // NOTE: while nats.c reconnects it buffers publishes and checks them against the old server's
  // max_payload; flushed to a new server with a smaller one, such a message makes that server
  // close the connection for good. So nothing is published unless connected, and a write that
  // sees the max_payload change midway (a reconnect) stops; the next one uses the new value.
  const std::int64_t max_payload = conn_.max_payload();
  if (!conn_.connected()) return format_error("not connected to NATS (reconnecting); retried at the next write");
  const std::size_t limit = chunk_body_limit(max_payload);
  std::size_t chunks = 0;
  auto publish_chunk = [&](std::string_view body, const char* part) -> BusStatus {
    if (!conn_.connected() || conn_.max_payload() != max_payload) {
      return BusError{NATS_CONNECTION_DISCONNECTED, "NATS reconnected during the write (max_payload " +
                                                        std::to_string(max_payload) + " -> " +
                                                        std::to_string(conn_.max_payload()) + ")"};
    }
    auto msg = Message::create(data_subject, body);
    if (!msg.ok()) return msg.error();
    if (auto s = msg.value().set_header(kSnapshotIdHeader, id.c_str()); !s.ok()) return s;
    if (part != nullptr) {
      if (auto s = msg.value().set_header(kSnapshotPartHeader, part); !s.ok()) return s;
    }
    auto ack = js_.publish(msg.value());
    if (!ack.ok()) return ack.error();
    if (first_chunk == 0) first_chunk = ack.value().sequence;
    last_chunk = ack.value().sequence;
    ++chunks;
    return {};
  };
  EventChunker chunker(limit, [&](std::string_view body) { return publish_chunk(body, nullptr); });
  for (const RouterEvent& event : snapshot.events) {
    if (auto s = chunker.add(event); !s.ok()) return format_error(s.error().message);
  }
  if (auto s = chunker.finish(); !s.ok()) return format_error(s.error().message);
  SnapshotCommit commit;
  commit.id = id;
  commit.stream_sequence = snapshot.stream_sequence;
  commit.first_chunk = first_chunk;
  commit.last_chunk = last_chunk;
  commit.chunks = chunks;
  commit.events = chunker.lines();
  commit.watermarks = snapshot.watermarks;
  commit.events_stream = snapshot.events_stream;
  commit.shard = snapshot.shard;
  std::string commit_body = encode_snapshot_commit(commit);
  if (commit_body.size() > limit) {
    // NOTE: tens of thousands of streams make the watermark list alone larger than a message:
    // then it goes into chunks of its own (header Kvidx-Snapshot-Part: watermarks, one
    // [worker_id,dp_rank,last_event_id] per line) between the event chunks and the commit.
    std::string body;
    for (const StreamWatermark& mark : snapshot.watermarks) {
      std::string line = encode_watermark_line(mark) + "\n";
      if (!body.empty() && body.size() + line.size() > limit) {
        if (auto s = publish_chunk(body, kWatermarksPart); !s.ok()) return format_error(s.error().message);
        body.clear();
      }
      body += line;
    }
    if (!body.empty()) {
      if (auto s = publish_chunk(body, kWatermarksPart); !s.ok()) return format_error(s.error().message);
    }
    commit.watermarks.clear();
    commit.watermarks_in_chunks = snapshot.watermarks.size();
    commit.first_chunk = first_chunk;
    commit.last_chunk = last_chunk;
    commit.chunks = chunks;
    commit_body = encode_snapshot_commit(commit);
  }
  auto ack = js_.publish(subjects_.snapshot_commit(name_), commit_body);
  if (!ack.ok()) return ack.error();
  // Older snapshots are garbage now; failures here only cost space.
  if (auto s = js_.purge(stream_, data_subject, chunks); !s.ok()) spdlog::warn("{}", s.error().message);
  if (auto s = js_.purge(stream_, subjects_.snapshot_commit(name_), 1); !s.ok()) {
    spdlog::warn("{}", s.error().message);
  }
  return SnapshotWritten{ack.value().sequence, chunks, chunker.lines(), chunker.split_events()};
}

BusResult<std::optional<IndexSnapshot>> SnapshotStore::load_latest() {
  return load_commit(subjects_.snapshot_commit(name_));
}

BusResult<std::optional<IndexSnapshot>> SnapshotStore::load_latest_of_any() {
  // NOTE: the last message on the wildcard <prefix>.snapshots.*.commit is the newest commit of any
  // name (JetStream's last-by-subject accepts wildcards).
  return load_commit(subjects_.snapshot_commit("*"));
}

BusResult<std::optional<std::pair<std::string, std::string>>> SnapshotStore::foreign_snapshot_of_name() {
  const Subjects unsharded(subjects_.prefix());
  // NOTE: "<p>.snapshots.*.<name>.commit" matches only the five-token shard layout, whichever shard.
  const std::string candidates[] = {
      unsharded.snapshot_commit(name_),
      unsharded.snapshots_wildcard().substr(0, unsharded.snapshots_wildcard().size() - 1) + "*." + name_ + ".commit"};
  for (const std::string& subject : candidates) {
    auto msg = js_.get_last_message(stream_, subject);
    if (!msg.ok()) {
      if (msg.error().status == NATS_NOT_FOUND) continue;
      return msg.error();
    }
    const std::string found(msg.value().subject());
    if (found == subjects_.snapshot_commit(name_)) continue;  // this store's own layout
    auto commit = decode_snapshot_commit(msg.value().data());
    return std::optional<std::pair<std::string, std::string>>(
        std::pair{found, commit.ok() ? commit.value().shard : std::string("?")});
  }
  return std::optional<std::pair<std::string, std::string>>{};
}

BusResult<std::optional<IndexSnapshot>> SnapshotStore::load_commit(const std::string& commit_subject) {
  auto commit_msg = js_.get_last_message(stream_, commit_subject);
  if (!commit_msg.ok()) {
    if (commit_msg.error().status == NATS_NOT_FOUND) return std::optional<IndexSnapshot>{};
    return commit_msg.error();
  }
  auto commit = decode_snapshot_commit(commit_msg.value().data());
  if (!commit.ok()) return format_error("bad commit record: " + commit.error().message());
  IndexSnapshot snapshot;
  {
    // <prefix>.snapshots.<name>.commit -> <name>
    const std::string subject(commit_msg.value().subject());
    const std::string head = subjects_.snapshot_commit("");
    const std::size_t dot = head.find("..");
    const std::string before = head.substr(0, dot + 1);
    const std::string after = head.substr(dot + 1);
    if (subject.size() > before.size() + after.size() && subject.rfind(before, 0) == 0) {
      snapshot.name = subject.substr(before.size(), subject.size() - before.size() - after.size());
    }
  }
  snapshot.id = commit.value().id;
  snapshot.stream_sequence = commit.value().stream_sequence;
  snapshot.watermarks = std::move(commit.value().watermarks);
  snapshot.events_stream = commit.value().events_stream;
  snapshot.shard = commit.value().shard;
  const std::uint64_t first_chunk = commit.value().first_chunk;
  const std::uint64_t last_chunk = commit.value().last_chunk;
  const std::uint64_t expected_events = commit.value().events;
  const std::uint64_t expected_chunked_marks = commit.value().watermarks_in_chunks;
  snapshot.events.reserve(expected_events);
  for (std::uint64_t seq = first_chunk; seq != 0 && seq <= last_chunk; ++seq) {
    auto chunk = js_.get_message(stream_, seq);
    if (!chunk.ok()) return chunk.error();
    if (chunk.value().header(kSnapshotIdHeader) != snapshot.id) continue;  // interleaved writer
    const bool marks = chunk.value().header(kSnapshotPartHeader) == std::string(kWatermarksPart);
    std::string_view rest = chunk.value().data();
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      if (line.empty()) continue;
      if (marks) {
        auto mark = decode_watermark_line(line);
        if (!mark.ok()) {
          return format_error("bad watermark in chunk " + std::to_string(seq) + ": " + mark.error().message());
        }
        snapshot.watermarks.push_back(mark.value());
        continue;
      }
      auto event = decode_router_event(line);
      if (!event.ok())
        return format_error("bad event in chunk " + std::to_string(seq) + ": " + event.error().message());
      snapshot.events.push_back(std::move(event).value());
    }
  }
  if (snapshot.events.size() != expected_events) {
    return format_error("snapshot " + snapshot.id + " has " + std::to_string(snapshot.events.size()) +
                        " events, commit says " + std::to_string(expected_events));
  }
  if (expected_chunked_marks > 0 && snapshot.watermarks.size() != expected_chunked_marks) {
    return format_error("snapshot " + snapshot.id + " has " + std::to_string(snapshot.watermarks.size()) +
                        " watermarks, commit says " + std::to_string(expected_chunked_marks));
  }
  return std::optional<IndexSnapshot>(std::move(snapshot));
}

}  // namespace kvidx::bus
