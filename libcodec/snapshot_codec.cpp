#include "libcodec/snapshot_codec.h"

#include "libcodec/json_reader.h"

namespace kvidx {

using namespace json_reader;

namespace {

// NOTE: a commit with its watermarks inline is at most the server's max_payload (64 MiB at most).
constexpr std::size_t kMaxSnapshotRecordBytes = std::size_t{64} << 20;
constexpr std::size_t kMaxSnapshotRecordDepth = 4;

Json watermark_json(const StreamWatermark& mark) {
  return Json::array({mark.first.worker_id, mark.first.dp_rank, mark.second});
}

StreamWatermark read_watermark(const Json& value, std::string_view path) {
  if (!value.is_array() || value.size() != 3) {
    fail(Kind::wrong_type, std::string(path),
         "expected [worker_id,dp_rank,last_event_id], got " +
             (value.is_array() ? std::to_string(value.size()) + " elements" : std::string(type_name(value))));
  }
  return {
      WorkerWithDpRank{read_u64(value[0], join(path, std::size_t{0})), read_u32(value[1], join(path, std::size_t{1}))},
      read_u64(value[2], join(path, std::size_t{2}))};
}

std::uint64_t optional_u64(const Json& root, std::string_view key) {
  const Json* value = find(root, key);
  return value == nullptr ? 0 : read_u64(*value, key);
}

}  // namespace

std::string encode_snapshot_commit(const SnapshotCommit& commit) {
  Json marks = Json::array();
  for (const StreamWatermark& mark : commit.watermarks) marks.push_back(watermark_json(mark));
  Json out{{"id", commit.id},
           {"stream_sequence", commit.stream_sequence},
           {"first_chunk", commit.first_chunk},
           {"last_chunk", commit.last_chunk},
           {"chunks", commit.chunks},
           {"events", commit.events},
           {"watermarks", std::move(marks)}};
  if (commit.watermarks_in_chunks > 0) out["watermarks_in_chunks"] = commit.watermarks_in_chunks;
  if (!commit.events_stream.empty()) out["events_stream"] = commit.events_stream;
  if (!commit.shard.empty()) out["shard"] = commit.shard;
  return out.dump();
}

Decoded<SnapshotCommit> decode_snapshot_commit(std::string_view json) {
  return guarded([&] {
    const Json root = parse_document(json, kMaxSnapshotRecordBytes, kMaxSnapshotRecordDepth);
    require_object(root, "");
    SnapshotCommit out;
    out.id = read_string(require(root, "id", ""), "id");
    out.stream_sequence = read_u64(require(root, "stream_sequence", ""), "stream_sequence");
    out.first_chunk = read_u64(require(root, "first_chunk", ""), "first_chunk");
    out.last_chunk = read_u64(require(root, "last_chunk", ""), "last_chunk");
    out.chunks = optional_u64(root, "chunks");
    out.events = read_u64(require(root, "events", ""), "events");
    out.watermarks_in_chunks = optional_u64(root, "watermarks_in_chunks");
    if (const Json* stream = find(root, "events_stream"); stream != nullptr) {
      out.events_stream = read_string(*stream, "events_stream");
    }
    if (const Json* shard = find(root, "shard"); shard != nullptr) out.shard = read_string(*shard, "shard");
    const Json& marks = require(root, "watermarks", "");
    if (!marks.is_array()) {
      fail(Kind::wrong_type, "watermarks", "expected an array, got " + std::string(type_name(marks)));
    }
    out.watermarks.reserve(marks.size());
    for (std::size_t i = 0; i < marks.size(); ++i)
      out.watermarks.push_back(read_watermark(marks[i], join("watermarks", i)));
    return out;
  });
}

std::string encode_watermark_line(const StreamWatermark& mark) { return watermark_json(mark).dump(); }

Decoded<StreamWatermark> decode_watermark_line(std::string_view json) {
  return guarded([&] { return read_watermark(parse_document(json, 1024, 2), ""); });
}

}  // namespace kvidx
