#include "libcodec/dump_codec.h"

#include "libcodec/event_codec.h"
#include "libcodec/json_reader.h"

namespace kvidx {

using namespace json_reader;

std::string encode_dump_end(const DumpEnd& end) {
  return Json{{"end", true}, {"events", end.events}, {"chunks", end.chunks}}.dump();
}

Decoded<DumpEnd> decode_dump_end(std::string_view json) {
  return guarded([&] {
    const Json root = parse_document(json, 1u << 20, 8);
    require_object(root, "");
    DumpEnd out;
    out.events = read_u64(require(root, "events", ""), "events");
    out.chunks = read_u64(require(root, "chunks", ""), "chunks");
    return out;
  });
}

Decoded<std::vector<RouterEvent>> decode_dump_chunk(std::string_view body) {
  std::vector<RouterEvent> events;
  std::size_t start = 0;
  while (start < body.size()) {
    std::size_t end = body.find('\n', start);
    if (end == std::string_view::npos) end = body.size();
    if (end > start) {
      auto decoded = decode_router_event(body.substr(start, end - start));
      if (!decoded.ok()) return decoded.error();
      events.push_back(std::move(decoded).value());
    }
    start = end + 1;
  }
  return events;
}

}  // namespace kvidx
