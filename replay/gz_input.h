// Input of the event-log readers: a file or "-" (stdin), plain or gzip, told apart by the first
// two bytes (gzip's magic), whatever the name. gzip is inflated with ISA-L's igzip (Debian
// libisal): on this project's 2-core VM it inflates the bench's 1.27 GiB log in 1.3 s, where
// zlib took ~4 s inside kvidx (and `gzip -d` 6.6 s): what bounded the replay of gzip logs. As with `gzip -d`,
// concatenated members are read one after another; a truncated member, a bad checksum or trailing bytes that are not
// another member are errors, never a silently short read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvidx {

class GzInput {
 public:
  explicit GzInput(const std::string& path);  // is_open() false on failure, errno says why
  ~GzInput();
  GzInput(const GzInput&) = delete;
  GzInput& operator=(const GzInput&) = delete;

  bool is_open() const { return fd_ >= 0; }
  // Whether the input is gzip. NOTE: reads its first bytes to tell (kept for read(); stdin and
  // pipes included), so it blocks until they arrive or the input ends.
  bool compressed();
  // Reads up to `size` bytes of the (inflated) input; returns bytes read, 0 at the end, -1 on error
  // (message in `error`). A read failed by a signal (EINTR) is an error, so a stop request can end
  // a read that waits on stdin.
  long read(char* buffer, unsigned size, std::string& error);
  // Bytes of the input consumed so far, as stored (compressed for gzip).
  std::uint64_t offset() const { return raw_read_ - (end_ - pos_); }
  std::uint64_t size() const { return size_; }  // 0: not a regular file

 private:
  enum class Mode : std::uint8_t { unknown, plain, gzip };
  struct Inflater;  // ISA-L's inflate_state (gz_input.cpp, where the destructor is)

  // Reads more of the file after what is buffered (keeping it); false on a read error.
  bool fill(std::string& error);
  // At least `count` bytes buffered, unless the input ends first; false on a read error.
  bool buffer_at_least(std::size_t count, std::string& error);
  bool detect(std::string& error);  // sets mode_ from the first bytes
  long read_plain(char* buffer, unsigned size, std::string& error);
  long read_gzip(char* buffer, unsigned size, std::string& error);

  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::vector<std::uint8_t> in_;  // raw input; [pos_, end_) not consumed yet
  std::size_t pos_ = 0;
  std::size_t end_ = 0;
  std::uint64_t raw_read_ = 0;  // bytes read from fd_
  bool eof_ = false;
  Mode mode_ = Mode::unknown;
  std::string detect_error_;  // a read error while telling the mode, reported by read()
  std::unique_ptr<Inflater> inflater_;
  bool member_done_ = false;     // the current gzip member ended (its checksum verified)
  bool member_checked_ = false;  // the current member's flags were checked (read_gzip)
};

}  // namespace kvidx
