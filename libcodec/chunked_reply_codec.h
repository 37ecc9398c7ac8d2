// The end marker of a chunked reply (libbus/chunked_reply.h: a reply larger than the server's
// max_payload sent as byte slices, then this marker): {"end":true,"bytes":B,"chunks":N}, the
// counts of what was sent, which the requester checks against what arrived.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "libcodec/codec_result.h"

namespace kvidx {

struct ChunkedReplyEnd {
  std::uint64_t bytes = 0;   // the whole reply's length
  std::uint64_t chunks = 0;  // slices sent before the marker
  friend bool operator==(const ChunkedReplyEnd&, const ChunkedReplyEnd&) = default;
};

std::string encode_chunked_reply_end(const ChunkedReplyEnd& end);
Decoded<ChunkedReplyEnd> decode_chunked_reply_end(std::string_view json);

}  // namespace kvidx
