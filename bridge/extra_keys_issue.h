// The first block of a BlockStored whose extra_keys could not be read: written by the extra_keys
// reader (vllm_extra_keys.h), carried on the decoded event (vllm_event_batch.h), acted on by the
// converter. Its own header so the reader and the batch decoder do not include each other.
#pragma once

#include <cstddef>
#include <string>

namespace kvidx::bridge {

struct ExtraKeysIssue {
  std::size_t block = 0;  // index of the first block whose extra keys could not be read
  std::string reason;     // names the key, e.g. "events[0][8][2][0]: ..."
};

}  // namespace kvidx::bridge
