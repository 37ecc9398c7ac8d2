// The handle a request keeps for the blocks it holds live in one BlockTracker.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "libindexer/load/prompt_path_arena.h"
#include "libindexer/protocol.h"

namespace kvidx {

// RequestBlockChain is one request's ownership in a BlockTracker: the arena node where its prompt
// ends (the terminal it co-owns) plus the output blocks it appended.
//
// Move-only: copying would create a second owner the tracker never counted. Obtain one only from
// BlockTracker::acquire_prompt and give it back only through BlockTracker::release on the same
// tracker; destroying a chain that holds blocks leaks its ownership. A moved-from chain is empty and
// releasing it is a no-op.
class RequestBlockChain {
 public:
  RequestBlockChain() = default;
  RequestBlockChain(const RequestBlockChain&) = delete;
  RequestBlockChain& operator=(const RequestBlockChain&) = delete;
  RequestBlockChain(RequestBlockChain&& other) noexcept
      : prompt_tail_(std::exchange(other.prompt_tail_, std::nullopt)),
        prompt_depth_(std::exchange(other.prompt_depth_, 0)),
        output_hashes_(std::exchange(other.output_hashes_, {})) {}
  RequestBlockChain& operator=(RequestBlockChain&& other) noexcept {
    prompt_tail_ = std::exchange(other.prompt_tail_, std::nullopt);
    prompt_depth_ = std::exchange(other.prompt_depth_, 0);
    output_hashes_ = std::exchange(other.output_hashes_, {});
    return *this;
  }
  ~RequestBlockChain() = default;

  std::size_t prompt_depth() const { return prompt_depth_; }
  std::span<const ExternalSequenceBlockHash> output_hashes() const { return output_hashes_; }
  bool holds_blocks() const { return prompt_tail_.has_value() || !output_hashes_.empty(); }

 private:
  friend class BlockTracker;
  friend struct BlockTrackerTestPeer;

  RequestBlockChain(std::optional<PathNodeId> prompt_tail, std::size_t prompt_depth)
      : prompt_tail_(prompt_tail), prompt_depth_(prompt_depth) {}

  // Invariant: prompt_tail_ is absent exactly when prompt_depth_ == 0 (empty prompt).
  std::optional<PathNodeId> prompt_tail_;
  std::size_t prompt_depth_ = 0;
  std::vector<ExternalSequenceBlockHash> output_hashes_;
};

}  // namespace kvidx
