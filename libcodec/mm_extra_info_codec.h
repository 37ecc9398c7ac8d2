// The mm_extra_info object of a stored block (Dynamo's multimodal objects; carried verbatim by
// RouterEvent, ignored by the tree): {"mm_objects":[{"mm_hash":H,"offsets":[]}...]}. The bridge
// builds it from vLLM's extra_keys, which give no object offsets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvidx {

// Keys sorted, as the event decoder keeps the object (nlohmann's dump), so a converted event and
// its decoded copy compare equal.
std::string encode_mm_extra_info(const std::vector<std::uint64_t>& mm_hashes);

}  // namespace kvidx
