// RouterEvents as JSON Lines packed into message bodies that fit a NATS server's max_payload: the
// one encoding step shared by snapshots (SnapshotStore) and dumps (kv.admin.dump), so any tree can
// be written, however long one of its edges is.
//
// An event whose line does not fit alone is split into several events of the same stream that do
// (split_event_to_fit): a Stored event into consecutive runs of its blocks, each run's parent_hash
// being the previous run's last block hash, so replaying the runs in order stores exactly the same
// chain; a Removed event into consecutive runs of its hashes. Only a single block (or hash) larger
// than the limit cannot be split: that is an error naming the sizes, never a silent drop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "libbus/nats_error.h"
#include "libindexer/protocol.h"

namespace kvidx::bus {

// The largest body of one chunk message for a server max_payload: headers (snapshot id, dump
// kind) and protocol overhead count against max_payload too, so min(4096, max_payload / 8) bytes
// are left for them.
std::size_t chunk_body_limit(std::int64_t max_payload);

// `event` as is when its JSON line (newline included) is at most `limit` bytes, else the pieces
// described above, each of whose lines is at most `limit` bytes. Pieces keep worker_id, dp_rank,
// event_id and storage tier; a Stored piece's start_position (when set) is offset by the blocks
// before it.
BusResult<std::vector<RouterEvent>> split_event_to_fit(const RouterEvent& event, std::size_t limit);

// Packs events as JSONL into bodies of at most `limit` bytes and hands each full body to `emit`
// (which publishes it). Events that do not fit alone are split (split_event_to_fit). Lines are
// renumbered: event_id = the line's index in the whole output, so ids stay unique and increasing
// per stream when one event became several (a dump's ids are its line order anyway).
class EventChunker {
 public:
  using Emit = std::function<BusStatus(std::string_view body)>;
  EventChunker(std::size_t limit, Emit emit);

  BusStatus add(const RouterEvent& event);
  // Emits the last, partly filled body (nothing when there is none).
  BusStatus finish();

  std::size_t lines() const { return lines_; }                // events written, pieces counted one by one
  std::size_t chunks() const { return chunks_; }              // bodies emitted
  std::size_t split_events() const { return split_events_; }  // events that had to be split

 private:
  void encode_numbered(const RouterEvent& event);  // into line_, with event_id = lines_
  BusStatus append_line();                         // line_ into the body (emitting a full one first)
  BusStatus emit_body();

  std::size_t limit_;
  Emit emit_;
  std::string body_;
  std::string line_;
  std::size_t lines_ = 0;
  std::size_t chunks_ = 0;
  std::size_t split_events_ = 0;
};

}  // namespace kvidx::bus
