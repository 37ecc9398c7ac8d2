// GzInput over a pipe widens it to 1 MiB, so a writer (`cat log |`) and the reader do not take
// turns every 64 KiB; bytes still arrive unchanged.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "replay/gz_input.h"

using namespace kvidx;

TEST_CASE("an event log read from a pipe gets a 1 MiB pipe buffer and reads every byte") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  REQUIRE(fcntl(fds[0], F_GETPIPE_SZ) < (1 << 20));  // the default the reader improves on
  const std::string payload(3 << 20, 'x');
  {
    // NOTE: opened through /proc, as a path names a pipe for `kvidx replay --events /dev/stdin`.
    GzInput input("/proc/self/fd/" + std::to_string(fds[0]));
    REQUIRE(input.is_open());
    CHECK(fcntl(fds[0], F_GETPIPE_SZ) >= (1 << 20));
    std::thread writer([&] {
      std::size_t sent = 0;
      while (sent < payload.size()) {
        const ssize_t n = write(fds[1], payload.data() + sent, payload.size() - sent);
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
      }
      close(fds[1]);
    });
    std::string got;
    std::string error;
    std::string buffer(1 << 20, '\0');
    for (long n; (n = input.read(buffer.data(), static_cast<unsigned>(buffer.size()), error)) > 0;) {
      got.append(buffer.data(), static_cast<std::size_t>(n));
    }
    writer.join();
    CHECK(error.empty());
    CHECK(got == payload);
  }
  close(fds[0]);
}
