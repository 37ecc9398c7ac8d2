// Framing of the live dump (<prefix>.admin.dump): the requester sends a request with a reply inbox
// and reads that inbox. kvidx answers with N >= 0 chunk messages (header Kvidx-Dump: chunk; body:
// JSONL, one Stored RouterEvent per line), then one end marker (header Kvidx-Dump: end; body
// {"end":true,"events":E,"chunks":N}, the counts of what was sent, or an error reply
// {"error":{...}} when the dump failed, before or midway).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "libcodec/codec_result.h"
#include "libindexer/protocol.h"

namespace kvidx {

inline constexpr const char* kDumpHeader = "Kvidx-Dump";
inline constexpr const char* kDumpChunk = "chunk";  // header values
inline constexpr const char* kDumpEnd = "end";

struct DumpEnd {
  std::uint64_t events = 0;
  std::uint64_t chunks = 0;
  friend bool operator==(const DumpEnd&, const DumpEnd&) = default;
};

std::string encode_dump_end(const DumpEnd& end);
// The counts of an end marker; an error end marker is not one (read it with decode_error_reply).
Decoded<DumpEnd> decode_dump_end(std::string_view json);

// A chunk's events, in order (blank lines skipped); the first bad line fails the whole chunk.
Decoded<std::vector<RouterEvent>> decode_dump_chunk(std::string_view body);

}  // namespace kvidx
