#include "libbus/event_chunks.h"

#include <algorithm>
#include <string>
#include <utility>
#include <variant>

#include "libcodec/event_codec.h"

namespace kvidx::bus {
namespace {

std::size_t line_size(const RouterEvent& event) {
  thread_local std::string buffer;
  buffer.clear();
  append_router_event(buffer, event);
  return buffer.size() + 1;  // the newline
}

// Splits `count` items (blocks or hashes) into consecutive runs whose event lines fit `limit`.
// `piece(b, e)` builds the event carrying items [b, e). The size of a run is computed exactly from
// the codec's own output: the line of piece(b, b) (the run's header: everything but its items)
// plus, per item, what adding it to an empty run adds, plus one separating comma.
template <class Piece>
BusResult<std::vector<RouterEvent>> split_runs(std::size_t count, std::size_t limit, const Piece& piece,
                                               const char* unit) {
  std::vector<RouterEvent> out;
  std::size_t begin = 0;
  while (begin < count) {
    const std::size_t header = line_size(piece(begin, begin));
    std::size_t size = header;
    std::size_t end = begin;
    while (end < count) {
      const std::size_t item = line_size(piece(end, end + 1)) - line_size(piece(end, end)) + 1;
      if (size + item > limit) break;
      size += item;
      ++end;
    }
    if (end == begin) {
      const std::size_t alone = line_size(piece(begin, begin + 1));
      return BusError{NATS_ERR, "one " + std::string(unit) + " needs a line of " + std::to_string(alone) +
                                    " bytes, more than the chunk limit of " + std::to_string(limit) + " bytes"};
    }
    RouterEvent run = piece(begin, end);
    // NOTE: the sum above is an upper bound of the real line (one comma fewer); checked anyway so
    // a codec change can never make a chunk exceed the limit unnoticed.
    while (line_size(run) > limit && end > begin + 1) run = piece(begin, --end);
    if (line_size(run) > limit) return BusError{NATS_ERR, "split piece still exceeds the chunk limit"};
    out.push_back(std::move(run));
    begin = end;
  }
  return out;
}

RouterEvent with_data(const RouterEvent& event, KvCacheEventData data) {
  RouterEvent out;
  out.worker_id = event.worker_id;
  out.storage_tier = event.storage_tier;
  out.event.event_id = event.event.event_id;
  out.event.dp_rank = event.event.dp_rank;
  out.event.data = std::move(data);
  return out;
}

}  // namespace

std::size_t chunk_body_limit(std::int64_t max_payload) {
  const std::int64_t reserve = std::min<std::int64_t>(4096, max_payload / 8);
  return static_cast<std::size_t>(std::max<std::int64_t>(max_payload - reserve, 256));
}

BusResult<std::vector<RouterEvent>> split_event_to_fit(const RouterEvent& event, std::size_t limit) {
  if (line_size(event) <= limit) return std::vector<RouterEvent>{event};
  if (const auto* stored = std::get_if<KvCacheStoreData>(&event.event.data)) {
    const auto& blocks = stored->blocks;
    auto piece = [&](std::size_t b, std::size_t e) {
      KvCacheStoreData data;
      // Each run hangs off the previous run's last block: replaying the runs in order rebuilds
      // the original chain block for block.
      data.parent_hash = b == 0 ? stored->parent_hash : std::optional(blocks[b - 1].block_hash);
      if (stored->start_position) data.start_position = *stored->start_position + static_cast<std::uint32_t>(b);
      data.blocks.assign(blocks.begin() + static_cast<std::ptrdiff_t>(b),
                         blocks.begin() + static_cast<std::ptrdiff_t>(e));
      for (std::size_t i = b; i < e; ++i) {
        if (const std::string* info = stored->mm_extra_info(i)) data.set_mm_extra_info(i - b, *info);
      }
      return with_data(event, std::move(data));
    };
    return split_runs(blocks.size(), limit, piece, "stored block");
  }
  if (const auto* removed = std::get_if<KvCacheRemoveData>(&event.event.data)) {
    const auto& hashes = removed->block_hashes;
    auto piece = [&](std::size_t b, std::size_t e) {
      KvCacheRemoveData data;
      data.block_hashes.assign(hashes.begin() + static_cast<std::ptrdiff_t>(b),
                               hashes.begin() + static_cast<std::ptrdiff_t>(e));
      return with_data(event, std::move(data));
    };
    return split_runs(hashes.size(), limit, piece, "removed hash");
  }
  return BusError{NATS_ERR, "a cleared event of " + std::to_string(line_size(event)) +
                                " bytes exceeds the chunk limit of " + std::to_string(limit) + " bytes"};
}

EventChunker::EventChunker(std::size_t limit, Emit emit) : limit_(limit), emit_(std::move(emit)) {}

BusStatus EventChunker::add(const RouterEvent& event) {
  encode_numbered(event);
  if (line_.size() <= limit_) return append_line();
  // NOTE: renumbering can lengthen a piece's event_id by up to 20 digits, so pieces are cut to
  // leave that much room.
  auto pieces = split_event_to_fit(event, limit_ > 64 ? limit_ - 20 : limit_);
  if (!pieces.ok()) {
    return BusError{pieces.error().status, "worker " + std::to_string(event.worker_id) + " rank " +
                                               std::to_string(event.event.dp_rank) + ": " + pieces.error().message};
  }
  ++split_events_;
  for (const RouterEvent& piece : pieces.value()) {
    encode_numbered(piece);
    if (auto s = append_line(); !s.ok()) return s;
  }
  return {};
}

void EventChunker::encode_numbered(const RouterEvent& event) {
  line_.clear();
  if (event.event.event_id == lines_) {
    append_router_event(line_, event);  // a dump numbers its events in order already: no copy
  } else {
    RouterEvent numbered = event;
    numbered.event.event_id = lines_;
    append_router_event(line_, numbered);
  }
  line_ += '\n';
}

BusStatus EventChunker::append_line() {
  if (!body_.empty() && body_.size() + line_.size() > limit_) {
    if (auto s = emit_body(); !s.ok()) return s;
  }
  body_ += line_;
  ++lines_;
  return {};
}

BusStatus EventChunker::finish() {
  if (body_.empty()) return {};
  return emit_body();
}

BusStatus EventChunker::emit_body() {
  auto s = emit_(body_);
  body_.clear();
  if (!s.ok()) return s;
  ++chunks_;
  return {};
}

}  // namespace kvidx::bus
