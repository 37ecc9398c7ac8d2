// JSON of the index snapshots kept in JetStream (libbus/snapshot_store.h describes the layout):
// the commit record written after a snapshot's chunks, and the watermark lines written in chunks
// of their own when the list is too large for the commit.
//
// Commit:         {"id":"...","stream_sequence":S,"first_chunk":A,"last_chunk":B,"chunks":N,"events":E,
//                  "watermarks":[[worker_id,dp_rank,last_event_id],...]}
//                 or, with the watermarks in chunks: "watermarks":[] and "watermarks_in_chunks":W;
//                 "events_stream":"KV_EVENTS" names the events stream it reflects (absent: unknown);
//                 "shard":"I/N" the shard that wrote it (absent: an unsharded instance)
// Watermark line: [worker_id,dp_rank,last_event_id]
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libcodec/codec_result.h"
#include "libindexer/protocol.h"

namespace kvidx {

// The last event id applied for one stream.
using StreamWatermark = std::pair<WorkerWithDpRank, std::uint64_t>;

struct SnapshotCommit {
  std::string id;
  std::uint64_t stream_sequence = 0;  // events stream sequence the snapshot reflects
  std::uint64_t first_chunk = 0;      // snapshot stream sequences of its chunks (0: none)
  std::uint64_t last_chunk = 0;
  std::uint64_t chunks = 0;
  std::uint64_t events = 0;  // event lines written (an edge split in k pieces counts k)
  std::vector<StreamWatermark> watermarks;
  // > 0: the watermarks are not in `watermarks` but in this many lines of watermark chunks.
  std::uint64_t watermarks_in_chunks = 0;
  // The JetStream events stream the snapshot reflects; a replica bootstraps only from its own.
  std::string events_stream;
  // "I/N" of the shard that wrote it (`kvidx serve --shard`); empty: unsharded. A restore refuses
  // a snapshot of another shard (it holds other workers).
  std::string shard;
  friend bool operator==(const SnapshotCommit&, const SnapshotCommit&) = default;
};

std::string encode_snapshot_commit(const SnapshotCommit& commit);
// "chunks" and "watermarks_in_chunks" may be absent (0), "events_stream" and "shard" too (""); the rest is required.
Decoded<SnapshotCommit> decode_snapshot_commit(std::string_view json);

std::string encode_watermark_line(const StreamWatermark& mark);  // no trailing newline
Decoded<StreamWatermark> decode_watermark_line(std::string_view json);

}  // namespace kvidx
