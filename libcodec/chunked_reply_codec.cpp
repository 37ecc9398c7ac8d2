#include "libcodec/chunked_reply_codec.h"

#include "libcodec/json_reader.h"

namespace kvidx {

using namespace json_reader;

std::string encode_chunked_reply_end(const ChunkedReplyEnd& end) {
  // NOTE: the key order of the marker as first shipped ({"end","bytes","chunks"}), not sorted.
  return nlohmann::ordered_json{{"end", true}, {"bytes", end.bytes}, {"chunks", end.chunks}}.dump();
}

Decoded<ChunkedReplyEnd> decode_chunked_reply_end(std::string_view json) {
  return guarded([&] {
    const Json root = parse_document(json, 1024, 2);
    require_object(root, "");
    ChunkedReplyEnd out;
    out.bytes = read_u64(require(root, "bytes", ""), "bytes");
    out.chunks = read_u64(require(root, "chunks", ""), "chunks");
    return out;
  });
}

}  // namespace kvidx
