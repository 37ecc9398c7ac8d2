#include "replay/gz_input.h"

#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace kvidx {

namespace {

constexpr std::size_t kBufferBytes = std::size_t{1} << 20;
constexpr std::uint8_t kGzipMagic0 = 0x1f;
constexpr std::uint8_t kGzipMagic1 = 0x8b;
constexpr std::uint8_t kGzipReservedFlags = 0xe0;  // FLG bits 5-7 (RFC 1952 section 2.3.1)

const char* inflate_error(int code) {
  switch (code) {
    case ISAL_INVALID_BLOCK: return "gzip: invalid deflate block (corrupt data)";
    case ISAL_INVALID_SYMBOL: return "gzip: invalid deflate symbol (corrupt data)";
    case ISAL_INVALID_LOOKBACK: return "gzip: invalid back-reference distance (corrupt data)";
    case ISAL_INVALID_WRAPPER: return "gzip: invalid header";
    case ISAL_UNSUPPORTED_METHOD: return "gzip: unsupported compression method";
    case ISAL_INCORRECT_CHECKSUM: return "gzip: checksum mismatch (corrupt data)";
    default: return "gzip: inflate failed";
  }
}

}  // namespace

struct GzInput::Inflater {
  inflate_state state;
};

GzInput::GzInput(const std::string& path) {
  const int fd = path == "-" ? dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat info {};
  if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) size_ = static_cast<std::uint64_t>(info.st_size);
  // A pipe (`cat log | kvidx replay --events -`) holds 64 KiB by default: the writer and this
  // reader then take turns 16 times per MiB read. 1 MiB is what Linux grants any user by default
  // (/proc/sys/fs/pipe-max-size); if refused, the pipe keeps its size.
  if (S_ISFIFO(info.st_mode)) (void)fcntl(fd, F_SETPIPE_SZ, 1 << 20);
  fd_ = fd;
  // NOTE: a file smaller than the buffer gets a buffer its size (a file that grows meanwhile is
  // still read whole, a buffer at a time): small logs, and the fuzzer's, cost no megabyte each.
  const std::uint64_t small_file = std::max<std::uint64_t>(size_ + 1, 4096);
  in_.resize(size_ > 0 && small_file < kBufferBytes ? static_cast<std::size_t>(small_file) : kBufferBytes);
}

GzInput::~GzInput() {
  if (fd_ >= 0) ::close(fd_);
}

bool GzInput::fill(std::string& error) {
  if (pos_ > 0) {  // keep what is not consumed at the front
    std::memmove(in_.data(), in_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  if (eof_ || end_ == in_.size()) return true;
  const ssize_t n = ::read(fd_, in_.data() + end_, in_.size() - end_);
  if (n < 0) {
    error = std::strerror(errno);
    return false;
  }
  if (n == 0) eof_ = true;
  end_ += static_cast<std::size_t>(n);
  raw_read_ += static_cast<std::uint64_t>(n);
  return true;
}

bool GzInput::buffer_at_least(std::size_t count, std::string& error) {
  while (end_ - pos_ < count && !eof_) {
    if (!fill(error)) return false;
  }
  return true;
}

bool GzInput::detect(std::string& error) {
  if (mode_ != Mode::unknown) return true;
  if (!buffer_at_least(2, error)) return false;
  const bool gzip = end_ - pos_ >= 2 && in_[pos_] == kGzipMagic0 && in_[pos_ + 1] == kGzipMagic1;
  mode_ = gzip ? Mode::gzip : Mode::plain;
  if (gzip) {
    inflater_ = std::make_unique<Inflater>();
    isal_inflate_init(&inflater_->state);
    inflater_->state.crc_flag = ISAL_GZIP;  // parse the header, verify the trailer's CRC-32
  }
  return true;
}

bool GzInput::compressed() {
  if (!is_open()) return false;
  if (!detect(detect_error_)) return false;  // read() reports the error
  return mode_ == Mode::gzip;
}

long GzInput::read(char* buffer, unsigned size, std::string& error) {
  if (!detect_error_.empty()) {
    error = detect_error_;
    return -1;
  }
  if (!detect(error)) return -1;
  if (size == 0) return 0;
  return mode_ == Mode::gzip ? read_gzip(buffer, size, error) : read_plain(buffer, size, error);
}

long GzInput::read_plain(char* buffer, unsigned size, std::string& error) {
  if (pos_ < end_) {  // what telling the mode read first
    const std::size_t n = std::min<std::size_t>(size, end_ - pos_);
    std::memcpy(buffer, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<long>(n);
  }
  if (eof_) return 0;
  const ssize_t n = ::read(fd_, buffer, size);
  if (n < 0) {
    error = std::strerror(errno);
    return -1;
  }
  if (n == 0) eof_ = true;
  raw_read_ += static_cast<std::uint64_t>(n);
  return static_cast<long>(n);
}

long GzInput::read_gzip(char* buffer, unsigned size, std::string& error) {
  inflate_state& state = inflater_->state;
  while (true) {
    if (member_done_) {
      // Invariant: a member is followed by the end of the input or by another member.
      if (!buffer_at_least(2, error)) return -1;
      if (pos_ == end_) return 0;
      if (end_ - pos_ < 2 || in_[pos_] != kGzipMagic0 || in_[pos_ + 1] != kGzipMagic1) {
        error = "gzip: bytes after the end of the compressed data that are not another gzip member";
        return -1;
      }
      isal_inflate_reset(&state);
      state.crc_flag = ISAL_GZIP;
      member_done_ = false;
      member_checked_ = false;
    }
    if (!member_checked_) {
      // RFC 1952: a reader must reject a member whose reserved flag bits are set (as zlib and
      // `gzip -d` do); ISA-L reads past them. Found by fuzz/gz_input_fuzz.cpp.
      if (!buffer_at_least(4, error)) return -1;
      if (end_ - pos_ >= 4 && (in_[pos_ + 3] & kGzipReservedFlags) != 0) {
        error = "gzip: reserved header flags set (corrupt data, or not gzip)";
        return -1;
      }
      member_checked_ = true;
    }
    if (pos_ == end_) {
      if (!fill(error)) return -1;
      if (pos_ == end_) {  // NOTE: the member has not ended: the input was cut short
        error = "gzip: unexpected end of file (truncated)";
        return -1;
      }
    }
    const std::size_t before = pos_;
    state.next_in = in_.data() + pos_;
    state.avail_in = static_cast<std::uint32_t>(end_ - pos_);
    state.next_out = reinterpret_cast<std::uint8_t*>(buffer);
    state.avail_out = size;
    const int code = isal_inflate(&state);
    pos_ = static_cast<std::size_t>(state.next_in - in_.data());
    if (code < 0) {
      error = inflate_error(code);
      return -1;
    }
    if (state.block_state == ISAL_BLOCK_FINISH) member_done_ = true;
    const unsigned produced = size - state.avail_out;
    if (produced > 0) return static_cast<long>(produced);
    // Nothing out yet: ISA-L took the input it was given (a header, a block's start) and the loop
    // fills more; input left with nothing taken would loop forever.
    if (!member_done_ && pos_ == before && pos_ < end_) {
      error = "gzip: inflate made no progress (corrupt data)";
      return -1;
    }
  }
}

}  // namespace kvidx
