// Index snapshots persisted in JetStream (stream default KV_SNAPSHOTS, subjects <prefix>.snapshots.>).
//
// Layout for one service name (its durable):
//   <prefix>.snapshots.<name>.data    chunk messages: JSONL of Stored RouterEvents (dump_events),
//                                     each under the server's max payload as it is at write time
//                                     (EventChunker: an edge too long for one message is written
//                                     as several chained events); header Kvidx-Snapshot-Id
//   <prefix>.snapshots.<name>.commit  one message per complete snapshot, written after its chunks:
//     {"id":"...","stream_sequence":S,"first_chunk":A,"last_chunk":B,"chunks":N,"events":E,
//      "watermarks":[[worker_id,dp_rank,last_event_id],...],"events_stream":"KV_EVENTS"}   (libcodec/snapshot_codec.h)
//   ("events" counts the lines written, so an edge split into k events counts k.)
// A snapshot exists only once its commit is stored, so a crash mid-write leaves the previous one
// in force. After a commit, older chunks and commits are purged.
// `stream_sequence` S: every event message of the events stream with sequence <= S is reflected
// in the snapshot; a restore resumes the consumer at S + 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"
#include "libbus/nats_jetstream.h"
#include "libbus/subjects.h"
#include "libindexer/protocol.h"

namespace kvidx::bus {

struct IndexSnapshot {
  std::string id;
  std::string name;  // load_*: the name (durable) that wrote it
  // The events stream the snapshot is a cut of (commit key "events_stream"; empty in snapshots
  // written before it existed). A bootstrap takes only a snapshot of its own events stream.
  std::string events_stream;
  // "I/N" of the shard that wrote it (commit key "shard"); empty: an unsharded instance.
  std::string shard;
  std::uint64_t stream_sequence = 0;
  std::vector<RouterEvent> events;
  std::vector<std::pair<WorkerWithDpRank, std::uint64_t>> watermarks;
};

struct SnapshotWritten {
  std::uint64_t commit_sequence = 0;
  std::size_t chunks = 0;
  std::size_t lines = 0;         // events written (an edge split in k pieces counts k)
  std::size_t split_events = 0;  // events too large for one chunk, written as several
};

class SnapshotStore {
 public:
  // `conn` is the connection `js` was made from. Its max_payload is read at every write: a
  // reconnect to a server with another max_payload changes it (natsConnection_GetMaxPayload), so
  // it is never cached. A write fails (and is retried by the caller) when the connection is not
  // connected or reconnected during the write: see write().
  SnapshotStore(JetStream& js, Connection& conn, Subjects subjects, std::string stream, std::string name);

  // Creates (or updates) the snapshot stream with `replicas` (stream_replicas.h: 0 automatic from
  // `known_servers`) and logs its replica count when it changed or differs from the automatic one.
  BusStatus ensure_stream(int replicas = 0, std::size_t known_servers = 1);
  // Writes the chunks, then the commit, then purges older snapshots of this name.
  BusResult<SnapshotWritten> write(const IndexSnapshot& snapshot);
  // The newest committed snapshot, nullopt when there is none; an error when one exists but
  // cannot be read back completely.
  BusResult<std::optional<IndexSnapshot>> load_latest();
  // The newest committed snapshot written under any name on this stream and prefix (another replica
  // of the same events stream: a new replica bootstraps from it), nullopt when there is none.
  BusResult<std::optional<IndexSnapshot>> load_latest_of_any();
  // A snapshot of this name written in another layout than this store's: by an unsharded instance
  // (<prefix>.snapshots.<name>.commit) or by a shard (<prefix>.snapshots.shard-I-of-N.<name>.commit),
  // i.e. the same --durable run before with another --shard. Its commit subject and "shard", or
  // nullopt when there is none.
  BusResult<std::optional<std::pair<std::string, std::string>>> foreign_snapshot_of_name();

 private:
  BusResult<std::optional<IndexSnapshot>> load_commit(const std::string& commit_subject);

  JetStream& js_;
  Subjects subjects_;
  std::string stream_;
  std::string name_;
  Connection& conn_;
};

}  // namespace kvidx::bus
