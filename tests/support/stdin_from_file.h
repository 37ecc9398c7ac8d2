// StdinFromFile: points this process's stdin at a pipe that a thread fills from a file (as
// `cat FILE | ...`) for the object's lifetime, then restores stdin. For tests and benches of
// readers that take '-' (a pipe: no known size, no seeking). Header-only.
#pragma once

#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kvidx::testing {

class StdinFromFile {
 public:
  explicit StdinFromFile(const std::string& path) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    saved_ = ::dup(STDIN_FILENO);
    ::dup2(fds[0], STDIN_FILENO);
    ::close(fds[0]);
    writer_ = std::thread([path, fd = fds[1]] {
      std::ifstream in(path, std::ios::binary);
      std::vector<char> buf(1 << 16);
      while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const char* p = buf.data();
        auto left = static_cast<std::size_t>(in.gcount());
        while (left > 0) {
          const ssize_t n = ::write(fd, p, left);
          if (n <= 0) break;
          p += n;
          left -= static_cast<std::size_t>(n);
        }
      }
      ::close(fd);  // the reader sees end of file
    });
  }
  ~StdinFromFile() {
    writer_.join();
    ::dup2(saved_, STDIN_FILENO);
    ::close(saved_);
  }
  StdinFromFile(const StdinFromFile&) = delete;
  StdinFromFile& operator=(const StdinFromFile&) = delete;

 private:
  int saved_ = -1;
  std::thread writer_;
};

}  // namespace kvidx::testing
