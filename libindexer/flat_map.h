// FlatMap<K, V>: a small insertion-ordered map in one vector, used for score results keyed by
// (worker, rank). A query scores
// every stream that holds its first block (about a thousand on a large fleet), so the result is
// built once by appending and read a few times; a vector of pairs costs one allocation where a
// hash map costs one per stream. Entries keep insertion order (for a tree query: the tree's slot
// order), which is not meaningful: compare two maps with ==, or use sorted() for a stable order.
// Lookups are linear scans, fine for the handful a caller makes per result.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kvidx {

template <typename K, typename V>
class FlatMap {
 public:
  using value_type = std::pair<K, V>;
  using iterator = typename std::vector<value_type>::iterator;
  using const_iterator = typename std::vector<value_type>::const_iterator;

  FlatMap() = default;
  // Takes entries built elsewhere. NOTE: the caller guarantees the keys are distinct (as append).
  explicit FlatMap(std::vector<value_type> entries) : entries_(std::move(entries)) {}

  iterator begin() { return entries_.begin(); }
  iterator end() { return entries_.end(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void reserve(std::size_t n) { entries_.reserve(n); }
  void clear() { entries_.clear(); }

  // Appends without looking: the caller guarantees `stream` is not present yet.
  void append(const K& stream, V value) { entries_.emplace_back(stream, std::move(value)); }

  iterator find(const K& stream) {
    return std::find_if(entries_.begin(), entries_.end(), [&](const value_type& e) { return e.first == stream; });
  }
  const_iterator find(const K& stream) const {
    return std::find_if(entries_.begin(), entries_.end(), [&](const value_type& e) { return e.first == stream; });
  }
  bool contains(const K& stream) const { return find(stream) != end(); }
  std::size_t count(const K& stream) const { return contains(stream) ? 1 : 0; }

  const V& at(const K& stream) const {
    const auto it = find(stream);
    if (it == end()) throw std::out_of_range("FlatMap::at: stream not present");
    return it->second;
  }
  // Inserts a value-initialised entry when absent.
  V& operator[](const K& stream) {
    auto it = find(stream);
    if (it != end()) return it->second;
    return entries_.emplace_back(stream, V{}).second;
  }
  std::pair<iterator, bool> emplace(const K& stream, V value) {
    auto it = find(stream);
    if (it != end()) return {it, false};
    entries_.emplace_back(stream, std::move(value));
    return {std::prev(entries_.end()), true};
  }

  // The entries ordered by key.
  std::vector<value_type> sorted() const {
    std::vector<value_type> out = entries_;
    std::sort(out.begin(), out.end(), [](const value_type& a, const value_type& b) { return a.first < b.first; });
    return out;
  }

  // Equal as sets of (stream, value), whatever the insertion order.
  friend bool operator==(const FlatMap& a, const FlatMap& b) {
    return a.size() == b.size() && a.sorted() == b.sorted();
  }

 private:
  std::vector<value_type> entries_;
};

}  // namespace kvidx
