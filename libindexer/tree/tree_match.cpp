// ConcurrentRadixTree, match path: prefix-overlap scores for a query, read hand over hand under
// shared locks while writers run. Locking rules and invariants: radix_tree.h.
#include "libindexer/tree/radix_tree.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <iterator>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "libindexer/tree/cache_prefetch.h"

namespace kvidx {

namespace {

std::uint32_t to_u32(std::size_t n) { return static_cast<std::uint32_t>(n); }

// The positions 0..n-1 as a forward range whose entries are make(i): a vector built from it
// allocates once and constructs each entry in place from make's result.
template <typename Make>
class GeneratedIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = std::invoke_result_t<const Make&, std::size_t>;
  using difference_type = std::ptrdiff_t;
  using pointer = void;
  using reference = value_type;  // made on each dereference (read once per position)

  GeneratedIterator(const Make& make, std::size_t position) : make_(&make), position_(position) {}
  value_type operator*() const { return (*make_)(position_); }
  GeneratedIterator& operator++() {
    ++position_;
    return *this;
  }
  GeneratedIterator operator++(int) {
    GeneratedIterator before = *this;
    ++position_;
    return before;
  }
  friend bool operator==(const GeneratedIterator& a, const GeneratedIterator& b) { return a.position_ == b.position_; }

 private:
  const Make* make_;
  std::size_t position_;
};

// NOTE: relies on the iterator-pair constructor of a forward range: it counts the positions, allocates
// once and constructs each entry from *it (libstdc++'s _M_range_initialize), which is why
// `reference` may be the value itself here.
template <typename Make>
std::vector<std::invoke_result_t<const Make&, std::size_t>> generated_vector(std::size_t n, const Make& make) {
  using Vector = std::vector<std::invoke_result_t<const Make&, std::size_t>>;
  return Vector(GeneratedIterator<Make>(make, 0), GeneratedIterator<Make>(make, n));
}

}  // namespace

OverlapScores ConcurrentRadixTree::find_matches(std::span<const LocalBlockHash> query, bool early_exit) const {
  OverlapScores out;
  if (query.empty()) return out;

  struct Hit {
    WorkerSlot slot;
    std::uint32_t score;
  };
  // NOTE: per-thread scratch, grown and never shrunk, keeps the traversal free of heap allocation
  // after warm-up. A query uses the buffers' first entries and writes them by index, with no
  // capacity check per stream: the first node of a fleet-wide prompt is held by thousands.
  thread_local std::vector<Hit> hit_buffer;
  thread_local std::vector<std::uint32_t> active_buffer;
  std::span<Hit> hits;              // every stream the query scores
  std::span<std::uint32_t> active;  // indices into hits, ascending slot order: still matching

  SharedLock lock(root_->mutex_);
  std::uint32_t depth = 0;
  bool first = true;
  // NOTE: `child` is found in the children of the node whose lock is held (the root's here, the
  // previous child's at the bottom of the loop), so it stays alive until it is locked below.
  const RadixNode* child = root_->children_.find(query[0]);
  while (child != nullptr) {
    SharedLock child_lock(child->mutex_);
    lock = std::move(child_lock);  // NOTE: hand over hand: child locked before parent released

    // The coverage is read after the edge is matched: start loading it now. Up to 11 entries sit
    // in the node's own lines (already requested with the node, below, for every node but the
    // first); a larger set is a heap array of its own and usually cold.
    prefetch_line(child->coverage_.entries().data());
    const std::uint32_t length = child->edge_length();
    // The next child is looked up before the edge is matched, so its cache misses (the child
    // table's index, then the node deeper in a long query: all its lines, the inline coverage
    // among them) overlap the fingerprint and the scoring. It is followed only if the query
    // matches the whole edge; otherwise it is unused.
    const RadixNode* next_child = nullptr;
    if (query.size() - depth > length) {
      next_child = child->children_.find(query[depth + length]);
      if (next_child != nullptr) {
        const char* const bytes = reinterpret_cast<const char*>(next_child);
        for (std::size_t offset = 0; offset < sizeof(RadixNode); offset += 64) prefetch_line(bytes + offset);
      }
    }
    std::uint32_t matched = 1;  // the child key is the edge's first local hash
    // A query reaching past the edge matches it whole when the fingerprints agree, without reading
    // the edge's blocks (edge_fingerprint.h); otherwise the blocks say how far it matches.
    if (length > 1 && query.size() - depth >= length &&
        query_fingerprint(query.subspan(depth, length), depth) == child->edge_fingerprint_) {
      matched = length;
    }
    // NOTE: one bound, computed once: the query ending inside a long edge (a prompt) is compared
    // block by block, and a second bound per block cost a third of the loop.
    const std::uint32_t limit = std::min<std::uint32_t>(length, to_u32(query.size() - depth));
    const EdgeBlock* const edge = child->edge_.data();
    const LocalBlockHash* const rest = query.data() + depth;
    while (matched < limit && edge[matched].local == rest[matched]) ++matched;
    const auto coverage = child->coverage_.entries();
    if (first) {
      first = false;
      if (hit_buffer.size() < coverage.size()) {
        hit_buffer.resize(coverage.size());
        active_buffer.resize(coverage.size());
      }
      hits = std::span<Hit>(hit_buffer).first(coverage.size());
      std::size_t kept = 0;
      for (std::size_t i = 0; i < coverage.size(); ++i) {
        const std::uint32_t reach = std::min(coverage[i].covered, matched);
        hits[i] = Hit{coverage[i].slot, depth + reach};
        // Every stream the result names is a holder of this first node; its registry record is
        // read when the result is built, after the walk: start loading it now.
        registry_.prefetch(coverage[i].slot);
        active_buffer[kept] = to_u32(i);
        kept += reach == length ? 1 : 0;
      }
      active = std::span<std::uint32_t>(active_buffer).first(kept);
    } else if (4 * coverage.size() < active.size()) {
      // Few of the active streams hold this edge (a prompt every stream holds, then a body a few
      // do): each holder is looked up in active (ascending slot order) instead of walking every
      // active stream. An active stream that holds none of the edge keeps its score: it is
      // `depth` already (it matched the whole edge above).
      std::size_t kept = 0;
      auto next = active.begin();
      for (const auto& entry : coverage) {
        next = std::lower_bound(next, active.end(), entry.slot,
                                [&](std::uint32_t index, WorkerSlot slot) { return hits[index].slot < slot; });
        if (next == active.end()) break;
        const std::uint32_t index = *next;
        if (hits[index].slot != entry.slot) continue;
        const std::uint32_t reach = std::min(entry.covered, matched);
        hits[index].score = depth + reach;
        // NOTE: kept <= next's position (each kept stream came from an earlier one), so this
        // overwrites only what the search has passed.
        if (reach == length) active[kept++] = index;
        ++next;
      }
      active = active.first(kept);
    } else {
      const bool gallop = coverage.size() > 4 * active.size();
      std::size_t kept = 0;
      const CoverageEntry* cursor = coverage.data();
      const CoverageEntry* const end = coverage.data() + coverage.size();
      for (const std::uint32_t index : active) {
        const WorkerSlot slot = hits[index].slot;
        if (gallop) {
          cursor = std::lower_bound(cursor, end, slot, [](const CoverageEntry& e, WorkerSlot s) { return e.slot < s; });
        } else {
          while (cursor != end && cursor->slot < slot) ++cursor;
        }
        const std::uint32_t covered = (cursor != end && cursor->slot == slot) ? cursor->covered : 0;
        const std::uint32_t reach = std::min(covered, matched);
        hits[index].score = depth + reach;
        if (reach == length) active[kept++] = index;
      }
      active = active.first(kept);
    }
    depth += matched;
    if (matched < length || active.empty()) break;
    if (early_exit && active.size() == 1) break;
    child = next_child;
  }
  lock.unlock();

  // NOTE: each vector is built from a generated range, so it allocates once and constructs every
  // entry in place: sized vectors value-initialised every entry before it was written (a quarter
  // of a wide query's cost per holder), and appending checks the capacity per entry. One registry
  // read per holder and vector. Each slot appears once in hits, so the keys are distinct (FlatMap's
  // precondition).
  const auto score_of = [&](std::size_t i) {
    return std::pair<WorkerWithDpRank, std::uint32_t>{registry_.stream_of(hits[i].slot), hits[i].score};
  };
  const auto tree_size_of = [&](std::size_t i) {
    const WorkerRegistry::SlotView slot = registry_.view(hits[i].slot);
    return std::pair<WorkerWithDpRank, std::size_t>{{slot.worker_id, slot.dp_rank},
                                                    static_cast<std::size_t>(std::max<std::int64_t>(0, slot.blocks))};
  };
  out.scores = FlatMap<WorkerWithDpRank, std::uint32_t>(generated_vector(hits.size(), score_of));
  out.tree_sizes = FlatMap<WorkerWithDpRank, std::size_t>(generated_vector(hits.size(), tree_size_of));
  // frequencies[d] = streams whose match reaches past depth d: constant between two consecutive
  // distinct scores, so it is written run by run (a fill per distinct score) instead of summed
  // entry by entry. No score passes `depth` (each is a node's start depth plus at most what the
  // query matched there), so the counts go into `depth` entries first; the length is the highest
  // score.
  out.frequencies.assign(depth, 0);
  // NOTE: through a local pointer: stores through the vector would alias its own data pointer.
  std::size_t* const frequencies = out.frequencies.data();
  thread_local std::vector<std::uint32_t> distinct_buffer;
  distinct_buffer.clear();
  for (const auto& hit : hits) {
    if (hit.score > 0 && ++frequencies[hit.score - 1] == 1) distinct_buffer.push_back(hit.score);
  }
  std::sort(distinct_buffer.begin(), distinct_buffer.end(), std::greater<>());
  std::size_t reaching = 0;
  for (std::size_t i = 0; i < distinct_buffer.size(); ++i) {
    const std::uint32_t score = distinct_buffer[i];
    const std::uint32_t below = i + 1 < distinct_buffer.size() ? distinct_buffer[i + 1] : 0;
    // NOTE: the count is read before the fill overwrites it (score - 1 lies in the filled run).
    reaching += frequencies[score - 1];
    std::fill(frequencies + below, frequencies + score, reaching);
  }
  out.frequencies.resize(distinct_buffer.empty() ? 0 : distinct_buffer.front());
  return out;
}

}  // namespace kvidx
