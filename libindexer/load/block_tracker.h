// Exact per-stream liveness of the blocks that in-flight requests hold, for load accounting.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "libindexer/load/prompt_path_arena.h"
#include "libindexer/load/request_block_chain.h"
#include "libindexer/protocol.h"

namespace kvidx {

// What acquire_prompt hands back: the request's handle and the first prompt position whose block
// was not live before this request (absent if the whole prompt was already live).
struct PromptAcquisition {
  RequestBlockChain chain;
  std::optional<std::size_t> first_new_position;
};

// The prompt of a released request and the position from which its blocks are no longer held by
// any request on this stream: path[remove_from..] became absent.
struct ReleasedPromptPath {
  std::vector<ExternalSequenceBlockHash> path;
  std::size_t remove_from = 0;

  friend bool operator==(const ReleasedPromptPath&, const ReleasedPromptPath&) = default;
};

// BlockTracker counts, for one worker stream, which blocks the live requests hold. Prompts share a
// path-compressed trie: a block is live while some request's prompt passes through it, and a
// request owns only the terminal node where its prompt ends. Output blocks are unique to their
// request and kept outside the trie.
//
// Blocks are named by ExternalSequenceBlockHash (the router's sequence hashes, i.e. what
// compute_sequence_hashes returns), not LocalBlockHash: the tracker relies on each hash committing
// to its whole prefix. It trusts callers on that lineage and on distinct live prefixes having
// distinct hashes; it does not detect collisions.
//
// active_blocks() is O(1): weights are kept as running totals. Contract violations (a chain from
// another tracker, a duplicate output hash) throw std::logic_error / return false; the tracker is
// not thread-safe (ActiveLoad adds the locking).
class BlockTracker {
 public:
  // Takes ownership of `prompt`'s path. An identical live prompt shares its terminal; a prompt that
  // ends inside an existing edge splits it, and existing chains stay valid.
  // Throws std::overflow_error (tracker unchanged) if a terminal already has 2^32-1 owners.
  [[nodiscard]] PromptAcquisition acquire_prompt(std::span<const ExternalSequenceBlockHash> prompt);

  // Adds an output block owned by `chain` alone, with weight 1. Returns false (nothing changed) if
  // `hash` is already a live output block of this tracker.
  [[nodiscard]] bool append_output(RequestBlockChain& chain, ExternalSequenceBlockHash hash);

  // Drops `chain`'s outputs and its terminal ownership. Returns the prompt and the position from
  // which blocks became absent, or nothing if every prompt block is still held by someone else (or
  // the prompt was empty). Iterative: safe for chains of any depth.
  std::optional<ReleasedPromptPath> release(RequestBlockChain chain);

  // Gives weight `fraction` (finite, >= 0) to the blocks only `chain` holds: its outputs and the
  // trailing run of prompt edges that no other request passes through or ends at. The weight stays
  // on those edges until they are removed, even if later requests come to share them (an edge split
  // gives both halves the old weight), as in the reference.
  void set_unique_suffix_fractional(const RequestBlockChain& chain, double fraction);

  // Sum of block weights, rounded to the nearest integer.
  std::size_t active_blocks() const;

  // Diagnostic: linear in the number of live prompt blocks.
  bool contains_block(ExternalSequenceBlockHash hash) const;

  // Test support: throws std::logic_error unless `chains` are exactly the live chains of this
  // tracker and the arena, owner counts, output map and running totals all agree.
  void assert_consistent(const std::vector<const RequestBlockChain*>& chains) const;

 private:
  friend struct BlockTrackerTestPeer;

  PromptPathArena arena_;
  // Running sums of EdgeLiveness::weight over the arena and of output_weights_.
  double prompt_weight_ = 0.0;
  std::unordered_map<ExternalSequenceBlockHash, double> output_weights_;
  double output_weight_ = 0.0;
};

}  // namespace kvidx
