// Input of the event-log readers: a file or "-" (stdin), plain or gzip, through zlib.
#pragma once

#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace kvidx {

// RAII over a zlib gzFile. NOTE: gzread passes plain (non-gzip) input through unchanged, which is
// how ".gz is read transparently" works for any file name.
class GzInput {
 public:
  explicit GzInput(const std::string& path) {
    const int fd = path == "-" ? dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat info {};
    if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) size_ = static_cast<std::uint64_t>(info.st_size);
    // A pipe (`cat log | kvidx replay --events -`) holds 64 KiB by default: the writer and this
    // reader then take turns 16 times per MiB read. 1 MiB is what Linux grants any user by default
    // (/proc/sys/fs/pipe-max-size); if refused, the pipe keeps its size.
    if (S_ISFIFO(info.st_mode)) (void)fcntl(fd, F_SETPIPE_SZ, 1 << 20);
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      return;
    }
    gzbuffer(file_, 1 << 20);
  }
  ~GzInput() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzInput(const GzInput&) = delete;
  GzInput& operator=(const GzInput&) = delete;

  bool is_open() const { return file_ != nullptr; }
  // Whether the input is gzip-compressed. NOTE: zlib reads the first bytes into its buffer to tell
  // (nothing is lost, stdin and pipes included); it blocks until they arrive or the input ends.
  bool compressed() const { return gzdirect(file_) == 0; }
  // Reads up to `size` bytes; returns bytes read, 0 at end, -1 on error (message in `error`).
  long read(char* buffer, unsigned size, std::string& error) {
    const int n = gzread(file_, buffer, size);
    if (n < 0) {
      int code = 0;
      const char* text = gzerror(file_, &code);
      error = code == Z_ERRNO ? std::strerror(errno) : text;
    }
    return n;
  }
  // Bytes of the input consumed so far, as stored (compressed for gzip).
  std::uint64_t offset() const {
    const auto at = gzoffset(file_);
    return at < 0 ? 0 : static_cast<std::uint64_t>(at);
  }
  std::uint64_t size() const { return size_; }  // 0: not a regular file

 private:
  gzFile file_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace kvidx
