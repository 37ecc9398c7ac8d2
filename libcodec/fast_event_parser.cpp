#include "libcodec/fast_event_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

namespace kvidx::fast_codec {
namespace {

// An array's elements are parsed into this thread's scratch vector (its capacity kept from line to
// line), then moved into the event at their exact count: one allocation per array, not the growth
// steps of appending (a 21-block Stored took 8, 16, 32), and no slack kept while the event waits in
// a lane's queue.
template <typename T>
class ScratchArray {
 public:
  ScratchArray() { items().clear(); }
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;
  ~ScratchArray() { items().clear(); }
  std::vector<T>& items() {
    thread_local std::vector<T> scratch;
    return scratch;
  }
  void move_into(std::vector<T>& out) {
    out.assign(std::make_move_iterator(items().begin()), std::make_move_iterator(items().end()));
  }
};

// NOTE: every `return false` below means "not sure", never "invalid": the DOM decoder decides.
// That is why the parser can be conservative wherever exactness would cost code (see the header).
class Parser {
 public:
  Parser(const char* begin, const char* end, const DecodeLimits& limits, std::size_t depth = 0)
      : p_(begin), end_(end), limits_(limits), depth_(depth) {}

  bool at_end() {
    skip_ws();
    return p_ == end_;
  }
  const char* pos() const { return p_; }
  void seek(const char* at) { p_ = at; }

  // ---- lexical pieces ------------------------------------------------------------------------

  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool peek(char c) {
    skip_ws();
    return p_ != end_ && *p_ == c;
  }

  bool consume(char c) {
    skip_ws();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }

  bool open(char c) {
    if (!consume(c)) return false;
    return ++depth_ <= limits_.max_nesting_depth;
  }
  void close() { --depth_; }

  bool literal(const char* word, std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return false;
    p_ += n;
    return true;
  }

  // `word` (a string literal) right here, no whitespace skipped. NOTE: the length is a constant,
  // so the compare compiles to a few integer compares.
  template <std::size_t N>
  bool lit(const char (&word)[N]) {
    if (static_cast<std::size_t>(end_ - p_) < N - 1 || std::memcmp(p_, word, N - 1) != 0) return false;
    p_ += N - 1;
    return true;
  }

  bool null_literal() {
    skip_ws();
    return literal("null", 4);
  }

  // A string of printable ASCII without escapes (keys and known string values).
  bool plain_string(std::string_view& out) {
    if (!consume('"')) return false;
    const char* start = p_;
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out = std::string_view(start, static_cast<std::size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
      ++p_;
    }
    return false;
  }

  // `"key" :`; then the caller reads the value.
  bool key(std::string_view& out) { return plain_string(out) && consume(':'); }

  // After a member or element: true and `more` for ',', true and !more for `close_char`.
  bool next(char close_char, bool& more) {
    skip_ws();
    if (p_ == end_) return false;
    if (*p_ == ',') {
      ++p_;
      more = true;
      return true;
    }
    if (*p_ == close_char) {
      ++p_;
      more = false;
      return true;
    }
    return false;
  }

  static bool is_digit(char c) { return static_cast<unsigned>(c - '0') <= 9; }

  // Eight bytes loaded little-endian (the first in the low byte). leading_digits: how many bytes,
  // from the first, are ASCII digits before the first that is not. A byte is a digit when it is
  // 0..9 after the xor; adding 0x76 sets the top bit of every byte over 9. NOTE: a byte over 0x89
  // carries into the next one, which comes after a non-digit already: only flags past the first
  // can be wrong, and only the first is used.
  static std::uint32_t leading_digits(std::uint64_t chunk) {
    const std::uint64_t x = chunk ^ 0x3030303030303030ULL;
    const std::uint64_t non_digits = ((x + 0x7676767676767676ULL) | x) & 0x8080808080808080ULL;
    return non_digits == 0 ? 8 : static_cast<std::uint32_t>(std::countr_zero(non_digits)) / 8;
  }
  static constexpr std::uint64_t kPowersOfTen[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
  // The value of eight ASCII digits (zero bytes read as leading zeros): the usual SWAR reduction,
  // pairs, then quads, then the eight.
  static std::uint64_t parse_eight_digits(std::uint64_t chunk) {
    chunk = (chunk & 0x0F0F0F0F0F0F0F0FULL) * 2561 >> 8;
    chunk = (chunk & 0x00FF00FF00FF00FFULL) * 6553601 >> 16;
    return (chunk & 0x0000FFFF0000FFFFULL) * 42949672960001ULL >> 32;
  }

  // The value of the first n (0..7) digits of a chunk whose first n bytes are digits: shifted so
  // they end at the top byte (the bytes shifted in are zeros, read as leading zeros). NOTE: two
  // shifts, so n == 0 shifts all out (one shift by 64 is undefined).
  static std::uint64_t parse_leading_digits(std::uint64_t chunk, std::uint32_t n) {
    return parse_eight_digits((chunk << (63 - 8 * n)) << 1);
  }

  // u64's long numbers: `p` at a number whose first 8 bytes (`c1`) are digits, with 24 bytes of
  // input from p. Reads the rest as u64 does; returns how many digits it read (0: out of range).
  static std::uint32_t eight_digits_and_more(const char* p, std::uint64_t c1, std::uint64_t& value) {
    std::uint64_t c2 = 0;
    std::memcpy(&c2, p + 8, 8);
    const std::uint32_t n2 = leading_digits(c2);
    if (n2 < 8) {
      value = parse_eight_digits(c1) * kPowersOfTen[n2] + parse_leading_digits(c2, n2);
      return 8 + n2;
    }
    std::uint64_t c3 = 0;
    std::memcpy(&c3, p + 16, 8);
    const std::uint32_t n3 = leading_digits(c3);
    if (n3 > 4) return 0;
    // NOTE: one checked path for 17 to 20 digits: random 64-bit hashes have 19 or 20 about
    // equally often, and a branch between the two would be mispredicted half the time.
    const std::uint64_t sixteen = parse_eight_digits(c1) * 100000000 + parse_eight_digits(c2);
    if (__builtin_mul_overflow(sixteen, kPowersOfTen[n3], &value) ||
        __builtin_add_overflow(value, parse_leading_digits(c3, n3), &value)) {
      return 0;
    }
    return 16 + n3;
  }

  // The digits of an unsigned integer at the cursor, read as the DOM decoder's number_unsigned
  // reads them (no sign, no leading zero, at most 2^64 - 1); the cursor moves past them. NOTE: the
  // byte after them is not looked at: u64 checks it; the canonical layout's callers leave it to
  // the literal that must come next (',', '}' or ']'), which a fraction, an exponent or a further
  // digit does not match.
  bool digits(std::uint64_t& out) {
    // NOTE: a local cursor: stores through p_ (a char*) would alias every load of the input.
    const char* p = p_;
    const char* const end = end_;
    if (p == end || !is_digit(*p)) return false;
    std::uint64_t value = 0;
    if (*p == '0') {
      ++p;  // a leading zero: a digit after it is rejected by what reads the next byte
    } else if (std::endian::native == std::endian::little && end - p >= 24) {
      // Three 8-byte chunks cover the longest valid number (20 digits) and the byte after it, all
      // inside the input (24 bytes left). A chunk with a non-digit ends the number; past 16
      // digits the sum is checked (only a 20th digit can overflow); a 21st is always out of range.
      std::uint64_t c1 = 0;
      std::memcpy(&c1, p, 8);
      const std::uint32_t n1 = leading_digits(c1);
      if (n1 == 1) {
        value = c1 & 0x0F;  // ids and ranks are often one digit: no reduction needed
        ++p;
      } else if (n1 < 8) {
        value = parse_leading_digits(c1, n1);
        p += n1;
      } else {
        const std::uint32_t count = eight_digits_and_more(p, c1, value);
        if (count == 0) return false;
        p += count;
      }
    } else {
      // 19 digits always fit; the 20th is checked; a 21st is always out of range.
      const char* const start = p;
      while (p != end && is_digit(*p) && p - start < 19) value = value * 10 + static_cast<std::uint64_t>(*p++ - '0');
      if (p != end && is_digit(*p)) {
        if (__builtin_mul_overflow(value, std::uint64_t{10}, &value) ||
            __builtin_add_overflow(value, static_cast<std::uint64_t>(*p - '0'), &value)) {
          return false;
        }
        ++p;
      }
    }
    p_ = p;
    out = value;
    return true;
  }

  // An unsigned integer exactly as the DOM decoder's number_unsigned: no sign, fraction, exponent
  // or leading zero, and at most 2^64 - 1.
  bool u64(std::uint64_t& out) {
    skip_ws();
    const char* const start = p_;
    if (!digits(out)) return false;
    if (p_ != end_ && (is_digit(*p_) || *p_ == '.' || *p_ == 'e' || *p_ == 'E')) {
      p_ = start;
      return false;
    }
    return true;
  }

  bool u32(std::uint32_t& out) {
    std::uint64_t wide = 0;
    if (!u64(wide) || wide > std::numeric_limits<std::uint32_t>::max()) return false;
    out = static_cast<std::uint32_t>(wide);
    return true;
  }
  // digits() for a u32 (the canonical layout's).
  bool digits32(std::uint32_t& out) {
    std::uint64_t wide = 0;
    if (!digits(wide) || wide > std::numeric_limits<std::uint32_t>::max()) return false;
    out = static_cast<std::uint32_t>(wide);
    return true;
  }

  // A JSON number (grammar checked). `integer` tells whether it had neither fraction nor exponent.
  bool number(std::string_view& text, bool& integer, std::size_t& int_digits) {
    skip_ws();
    const char* start = p_;
    if (p_ != end_ && *p_ == '-') ++p_;
    if (p_ == end_ || !is_digit(*p_)) return false;
    const char* digits = p_;
    if (*p_ == '0')
      ++p_;
    else
      while (p_ != end_ && is_digit(*p_)) ++p_;
    int_digits = static_cast<std::size_t>(p_ - digits);
    integer = true;
    if (p_ != end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    text = std::string_view(start, static_cast<std::size_t>(p_ - start));
    return true;
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool hex4(unsigned& out) {
    if (end_ - p_ < 4) return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex(p_[i]);
      if (h < 0) return false;
      out = out * 16 + static_cast<unsigned>(h);
    }
    p_ += 4;
    return true;
  }

  // Any valid string whose value is not needed: ASCII content, the JSON escapes, \u escapes
  // including well-formed surrogate pairs. Non-ASCII bytes are left to the DOM decoder (it
  // validates UTF-8).
  bool skip_string() {
    if (p_ == end_ || *p_ != '"') return false;
    ++p_;
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_++);
      if (c == '"') return true;
      if (c < 0x20 || c >= 0x80) return false;
      if (c != '\\') continue;
      if (p_ == end_) return false;
      switch (*p_++) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't': break;
        case 'u': {
          unsigned unit = 0;
          if (!hex4(unit)) return false;
          if (unit >= 0xDC00 && unit <= 0xDFFF) return false;  // lone low surrogate
          if (unit >= 0xD800 && unit <= 0xDBFF) {
            unsigned low = 0;
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
            p_ += 2;
            if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
          }
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  // Any JSON value (validated, not kept). Iterative, so hostile nesting cannot overflow the stack.
  bool skip_value() {
    constexpr int kMaxLocal = 64;
    char stack[kMaxLocal];
    int top = 0;
    while (true) {
      skip_ws();
      if (p_ == end_) return false;
      bool value_done = true;
      switch (*p_) {
        case '{':
        case '[': {
          const char kind = *p_;
          if (top == kMaxLocal || !open(kind)) return false;
          stack[top++] = kind;
          const char close_char = kind == '{' ? '}' : ']';
          if (consume(close_char)) {
            --top;
            close();
          } else if (kind == '{') {
            if (!skip_key()) return false;
            value_done = false;
          } else {
            value_done = false;
          }
          break;
        }
        case '"':
          if (!skip_string()) return false;
          break;
        case 't':
          if (!literal("true", 4)) return false;
          break;
        case 'f':
          if (!literal("false", 5)) return false;
          break;
        case 'n':
          if (!literal("null", 4)) return false;
          break;
        default: {
          std::string_view text;
          bool integer = false;
          std::size_t int_digits = 0;
          if (!number(text, integer, int_digits)) return false;
          // NOTE: the DOM decoder rejects numbers that overflow a double ("number overflow"); an
          // exponent or a very long integer part might, so those are left to it.
          if (int_digits > 300) return false;
          for (char c : text) {
            if (c == 'e' || c == 'E') return false;
          }
          break;
        }
      }
      if (!value_done) continue;
      // A value ended: close containers or move to the next member/element.
      while (true) {
        if (top == 0) return true;
        const char kind = stack[top - 1];
        bool more = false;
        if (!next(kind == '{' ? '}' : ']', more)) return false;
        if (more) {
          if (kind == '{' && !skip_key()) return false;
          break;
        }
        --top;
        close();
      }
    }
  }

  bool skip_key() {
    skip_ws();
    return skip_string() && consume(':');
  }

  // ---- RouterEvent structure -----------------------------------------------------------------

  bool optional_hash(std::optional<ExternalSequenceBlockHash>& out) {
    if (peek('n')) {
      out.reset();
      return null_literal();
    }
    std::uint64_t v = 0;
    if (!u64(v)) return false;
    out = ExternalSequenceBlockHash{v};
    return true;
  }

  bool block(StoredBlock& out, std::optional<std::string>& mm) {
    if (!open('{')) return false;
    bool has_block = false, has_tokens = false, has_mm = false;
    if (!consume('}')) {
      bool more = true;
      while (more) {
        std::string_view k;
        if (!key(k)) return false;
        if (k == "block_hash") {
          if (has_block || !u64(out.block_hash.value)) return false;
          has_block = true;
        } else if (k == "tokens_hash") {
          if (has_tokens || !u64(out.tokens_hash.value)) return false;
          has_tokens = true;
        } else if (k == "mm_extra_info") {
          if (has_mm || !mm_extra_info(mm)) return false;
          has_mm = true;
        } else if (!skip_value()) {
          return false;
        }
        if (!next('}', more)) return false;
      }
    }
    close();
    return has_block && has_tokens;
  }

  // The DOM decoder keeps mm_extra_info as nlohmann's dump() of the object (sorted keys, its own
  // number and string formatting); reproduce it exactly by letting nlohmann dump the same span.
  bool mm_extra_info(std::optional<std::string>& out) {
    if (peek('n')) {
      out.reset();
      return null_literal();
    }
    if (!peek('{')) return false;
    const char* start = p_;
    if (!skip_value()) return false;
    try {
      out = nlohmann::json::parse(start, p_).dump();
    } catch (const std::exception&) {
      return false;
    }
    return true;
  }

  bool stored(KvCacheStoreData& out) {
    if (!open('{')) return false;
    bool has_parent = false, has_start = false, has_blocks = false;
    if (!consume('}')) {
      bool more = true;
      while (more) {
        std::string_view k;
        if (!key(k)) return false;
        if (k == "blocks") {
          if (has_blocks || !blocks(out)) return false;
          has_blocks = true;
        } else if (k == "parent_hash") {
          if (has_parent || !optional_hash(out.parent_hash)) return false;
          has_parent = true;
        } else if (k == "start_position") {
          if (has_start) return false;
          has_start = true;
          if (peek('n')) {
            if (!null_literal()) return false;
          } else {
            std::uint32_t v = 0;
            if (!u32(v)) return false;
            out.start_position = v;
          }
        } else if (!skip_value()) {
          return false;
        }
        if (!next('}', more)) return false;
      }
    }
    close();
    return has_blocks;
  }

  // The blocks array into out.blocks, and their mm_extra_info into out.mm_extra_infos (left empty
  // when no block has one, as the DOM decoder does).
  bool blocks(KvCacheStoreData& out) {
    if (!open('[')) return false;
    if (!consume(']')) {
      ScratchArray<StoredBlock> scratch;
      auto& parsed = scratch.items();
      std::vector<std::optional<std::string>> infos;
      std::optional<std::string> mm;
      bool more = true;
      while (more) {
        if (parsed.size() == limits_.max_blocks_per_event) return false;
        if (!block(parsed.emplace_back(), mm)) return false;
        if (mm) {
          infos.resize(parsed.size());
          infos.back() = std::exchange(mm, std::nullopt);
        }
        if (!next(']', more)) return false;
      }
      scratch.move_into(out.blocks);
      if (!infos.empty()) {
        infos.resize(out.blocks.size());
        out.mm_extra_infos = std::move(infos);
      }
    }
    close();
    return true;
  }

  bool removed(KvCacheRemoveData& out) {
    if (!open('{')) return false;
    bool has_hashes = false;
    if (!consume('}')) {
      bool more = true;
      while (more) {
        std::string_view k;
        if (!key(k)) return false;
        if (k == "block_hashes") {
          if (has_hashes || !hash_array(out.block_hashes)) return false;
          has_hashes = true;
        } else if (!skip_value()) {
          return false;
        }
        if (!next('}', more)) return false;
      }
    }
    close();
    return has_hashes;
  }

  bool hash_array(std::vector<ExternalSequenceBlockHash>& out) {
    if (!open('[')) return false;
    if (!consume(']')) {
      ScratchArray<ExternalSequenceBlockHash> scratch;
      auto& parsed = scratch.items();
      bool more = true;
      while (more) {
        if (parsed.size() == limits_.max_blocks_per_event) return false;
        std::uint64_t v = 0;
        if (!u64(v)) return false;
        parsed.push_back(ExternalSequenceBlockHash{v});
        if (!next(']', more)) return false;
      }
      scratch.move_into(out);
    }
    close();
    return true;
  }

  // Externally tagged: "cleared", or an object with exactly one variant key.
  bool data(KvCacheEventData& out) {
    if (peek('"')) {
      std::string_view name;
      if (!plain_string(name) || name != "cleared") return false;
      out = KvCacheClearData{};
      return true;
    }
    if (!open('{')) return false;
    std::string_view variant;
    if (!key(variant)) return false;  // also rejects the empty object
    if (variant == "stored") {
      if (!stored(out.emplace<KvCacheStoreData>())) return false;
    } else if (variant == "removed") {
      if (!removed(out.emplace<KvCacheRemoveData>())) return false;
    } else if (variant == "cleared") {
      if (peek('n')) {
        if (!null_literal()) return false;
      } else {
        if (!open('{') || !consume('}')) return false;
        close();
      }
      out = KvCacheClearData{};
    } else {
      return false;
    }
    // NOTE: a second key (even a duplicate of the first) is left to the DOM decoder.
    if (!consume('}')) return false;
    close();
    return true;
  }

  bool event_body(KvCacheEvent& out) {
    if (!open('{')) return false;
    bool has_id = false, has_rank = false, has_data = false;
    if (!consume('}')) {
      bool more = true;
      while (more) {
        std::string_view k;
        if (!key(k)) return false;
        if (k == "event_id") {
          if (has_id || !u64(out.event_id)) return false;
          has_id = true;
        } else if (k == "data") {
          if (has_data || !data(out.data)) return false;
          has_data = true;
        } else if (k == "dp_rank") {
          if (has_rank || !u32(out.dp_rank)) return false;
          has_rank = true;
        } else if (!skip_value()) {
          return false;
        }
        if (!next('}', more)) return false;
      }
    }
    close();
    return has_id && has_data;
  }

  // The layout every encoder we know writes (kvidx's own and Dynamo's serde order: no whitespace,
  // known keys only, each once, in this order). Anything else returns false, and the caller goes
  // the general way from the same place. NOTE: only exact literals, numbers through digits() and
  // the same limits are accepted, so a document taken here is one the DOM decoder accepts with the
  // same result; depth_ is not tracked, so the deepest layout (6 levels) must fit the limit first.
  // Invariant: every number here is followed by a literal starting with ',', '}' or ']' (what
  // makes digits() exact without u64's look at the next byte).
  bool canonical_router_event(RouterEvent& out) {
    if (depth_ + 6 > limits_.max_nesting_depth) return false;
    if (!lit("{\"worker_id\":") || !digits(out.worker_id)) return false;
    if (lit(",\"storage_tier\":")) {
      std::string_view name;
      if (!plain_string(name)) return false;
      out.storage_tier = storage_tier_from_string(name);
      if (!out.storage_tier) return false;
    }
    if (!lit(",\"event\":{\"event_id\":") || !digits(out.event.event_id) || !lit(",\"data\":")) return false;
    if (lit("{\"stored\":{\"parent_hash\":")) {
      auto& data = out.event.data.emplace<KvCacheStoreData>();
      if (!lit("null")) {
        std::uint64_t parent = 0;
        if (!digits(parent)) return false;
        data.parent_hash = ExternalSequenceBlockHash{parent};
      }
      if (lit(",\"start_position\":")) {
        std::uint32_t start = 0;
        if (!digits32(start)) return false;
        data.start_position = start;
      }
      if (!lit(",\"blocks\":[")) return false;
      if (!lit("]")) {
        ScratchArray<StoredBlock> scratch;
        auto& parsed = scratch.items();
        do {
          if (parsed.size() == limits_.max_blocks_per_event) return false;
          StoredBlock& block = parsed.emplace_back();
          if (!lit("{\"block_hash\":") || !digits(block.block_hash.value) || !lit(",\"tokens_hash\":") ||
              !digits(block.tokens_hash.value) || !lit("}")) {
            return false;  // mm_extra_info too goes the general way
          }
        } while (lit(","));
        if (!lit("]")) return false;
        scratch.move_into(data.blocks);
      }
      if (!lit("}}")) return false;
    } else if (lit("{\"removed\":{\"block_hashes\":[")) {
      auto& hashes = out.event.data.emplace<KvCacheRemoveData>().block_hashes;
      if (!lit("]")) {
        ScratchArray<ExternalSequenceBlockHash> scratch;
        auto& parsed = scratch.items();
        do {
          if (parsed.size() == limits_.max_blocks_per_event) return false;
          if (!digits(parsed.emplace_back().value)) return false;
        } while (lit(","));
        if (!lit("]")) return false;
        scratch.move_into(hashes);
      }
      if (!lit("}}")) return false;
    } else if (lit("\"cleared\"")) {
      out.event.data = KvCacheClearData{};
    } else {
      return false;
    }
    return lit(",\"dp_rank\":") && digits32(out.event.dp_rank) && lit("}}");
  }

  bool router_event(RouterEvent& out) {
    skip_ws();
    const char* const start = p_;
    if (canonical_router_event(out)) return true;
    p_ = start;
    out = RouterEvent{};
    return general_router_event(out);
  }

  bool general_router_event(RouterEvent& out) {
    if (!open('{')) return false;
    bool has_worker = false, has_tier = false, has_event = false;
    if (!consume('}')) {
      bool more = true;
      while (more) {
        std::string_view k;
        if (!key(k)) return false;
        if (k == "worker_id") {
          if (has_worker || !u64(out.worker_id)) return false;
          has_worker = true;
        } else if (k == "event") {
          if (has_event || !event_body(out.event)) return false;
          has_event = true;
        } else if (k == "storage_tier") {
          if (has_tier) return false;
          has_tier = true;
          if (peek('n')) {
            if (!null_literal()) return false;
          } else {
            std::string_view name;
            if (!plain_string(name)) return false;
            out.storage_tier = storage_tier_from_string(name);
            if (!out.storage_tier) return false;
          }
        } else if (!skip_value()) {
          return false;
        }
        if (!next('}', more)) return false;
      }
    }
    close();
    return has_worker && has_event;
  }

  // The wrapper's "ts": any finite number as the DOM decoder converts it (integers through
  // u64/i64 like nlohmann's number_unsigned/number_integer, the rest correctly rounded).
  bool ts_number(double& out) {
    std::string_view text;
    bool integer = false;
    std::size_t int_digits = 0;
    if (!number(text, integer, int_digits)) return false;
    const char* first = text.data();
    const char* last = text.data() + text.size();
    if (integer) {
      if (text.front() == '-') {
        std::int64_t v = 0;
        auto [ptr, ec] = std::from_chars(first, last, v);
        if (ec == std::errc() && ptr == last) {
          out = static_cast<double>(v);
          return true;
        }
      } else {
        std::uint64_t v = 0;
        auto [ptr, ec] = std::from_chars(first, last, v);
        if (ec == std::errc() && ptr == last) {
          out = static_cast<double>(v);
          return true;
        }
      }
    }
    double v = 0;
    auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || ptr != last || !std::isfinite(v)) return false;  // out of range
    out = v;
    return true;
  }

  // The wrapper's "ts" and "subject" values (null or a value), read as pass 2 of
  // try_decode_event_log_line would; false (the cursor then anywhere) for anything else.
  bool ts_value(std::optional<double>& out) {
    if (peek('n')) return null_literal();
    double v = 0;
    if (!ts_number(v)) return false;
    out = v;
    return true;
  }
  bool subject_value(std::optional<std::string_view>& out) {
    if (peek('n')) return null_literal();
    std::string_view text;
    if (!plain_string(text)) return false;
    out = text;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
  const DecodeLimits& limits_;
  std::size_t depth_;
};

}  // namespace

bool try_decode_router_event(std::string_view json, const DecodeLimits& limits, RouterEvent& out) {
  if (json.size() > limits.max_message_bytes) return false;
  Parser parser(json.data(), json.data() + json.size(), limits);
  return parser.router_event(out) && parser.at_end();
}

bool try_decode_router_events(std::string_view json, const DecodeLimits& limits, std::vector<RouterEvent>& out) {
  out.clear();
  if (json.size() > limits.max_message_bytes) return false;
  Parser parser(json.data(), json.data() + json.size(), limits);
  if (parser.peek('{')) return parser.router_event(out.emplace_back()) && parser.at_end();
  if (!parser.open('[')) return false;
  // NOTE: about one slot per 128 bytes (a 4-block event is ~230) instead of growing 1, 2, 4, ...
  out.reserve(std::min(limits.max_events_per_batch, json.size() / 128 + 1));
  if (!parser.consume(']')) {
    bool more = true;
    while (more) {
      if (out.size() == limits.max_events_per_batch) return false;
      if (!parser.router_event(out.emplace_back())) return false;
      if (!parser.next(']', more)) return false;
    }
  }
  parser.close();
  return parser.at_end();
}

bool try_decode_event_log_line(std::string_view line, const DecodeLimits& limits, EventLogLine& out) {
  if (line.size() > limits.max_message_bytes) return false;
  const char* const begin = line.data();
  const char* const end = line.data() + line.size();
  // Pass 1 over the top level: whether "worker_id" is present decides between the bare event and
  // the capture wrapper, and it may come after "event", so member values are located here, and
  // read where that is safe either way (the wrapper's "event" when it decodes as a RouterEvent,
  // "ts", "subject").
  Parser top(begin, end, limits);
  if (!top.open('{')) return false;
  bool has_worker = false;
  bool event_decoded = false;  // "event" was decoded as a RouterEvent during pass 1
  const char* event_at = nullptr;
  const char* ts_at = nullptr;
  const char* subject_at = nullptr;
  // "ts" and "subject" as read in pass 1 (when they read there: see below).
  bool ts_read = false, subject_read = false;
  std::optional<double> ts;
  std::optional<std::string_view> subject;
  if (!top.consume('}')) {
    bool more = true;
    while (more) {
      std::string_view k;
      if (!top.key(k)) return false;
      top.skip_ws();
      const char* at = top.pos();
      if (k == "worker_id") {
        if (has_worker) return false;
        has_worker = true;
      } else if (k == "event") {
        if (event_at != nullptr) return false;
        event_at = at;
        if (!has_worker) {
          // NOTE: the capture wrapper's usual layout: decode "event" now instead of skipping it
          // here and parsing it again in pass 2. When it is not a RouterEvent (a bare event's
          // body, where "worker_id" may still follow), it is skipped as any other value.
          Parser event(at, end, limits, 1);
          if (event.router_event(out.event)) {
            event_decoded = true;
            top.seek(event.pos());
            if (!top.next('}', more)) return false;
            continue;
          }
          out.event = RouterEvent{};
        }
      } else if (k == "ts" || k == "subject") {
        const bool is_ts = k == "ts";
        const char*& value_at = is_ts ? ts_at : subject_at;
        if (value_at != nullptr) return false;
        value_at = at;
        // NOTE: read here, once, instead of skipped here and read again in pass 2. A value that
        // does not read is skipped as any other: a bare event ignores it, a wrapper is refused.
        bool& read = is_ts ? ts_read : subject_read;
        read = is_ts ? top.ts_value(ts) : top.subject_value(subject);
        if (read) {
          if (!top.next('}', more)) return false;
          continue;
        }
        top.seek(at);
      }
      if (!top.skip_value()) return false;
      if (!top.next('}', more)) return false;
    }
  }
  top.close();
  if (!top.at_end()) return false;

  out.ts.reset();
  out.subject.reset();
  if (has_worker) {  // bare; ts/subject ignored
    out.event = RouterEvent{};
    return try_decode_router_event(line, limits, out.event);
  }
  if (event_at == nullptr) return false;
  // Pass 2: the located values (already validated as JSON by pass 1).
  if (!event_decoded) {
    Parser event(event_at, end, limits, 1);
    if (!event.router_event(out.event)) return false;
  }
  // A "ts" or "subject" that did not read in pass 1 would not read here either.
  if (ts_at != nullptr) {
    if (!ts_read) return false;
    out.ts = ts;
  }
  if (subject_at != nullptr) {
    if (!subject_read) return false;
    if (subject) out.subject = std::string(*subject);
  }
  return true;
}

}  // namespace kvidx::fast_codec
