// GzInput: plain input passes through unchanged; gzip (told by its first bytes) is inflated with
// ISA-L and gives back exactly what zlib compressed, member after member; a truncated or corrupt
// member or trailing bytes are errors, never a short read; a pipe is widened to 1 MiB, so a writer
// (`cat log |`) and the reader do not take turns every 64 KiB.
#include <doctest/doctest.h>
#include <zlib.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "replay/gz_input.h"
#include "tests/support/child_process.h"

using namespace kvidx;
using kvidx::testing::TempDir;

namespace {

// `text` as one gzip member (zlib's deflate with the gzip wrapper), at `level`.
std::string gzip_member(const std::string& text, int level = 6) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

struct ReadAll {
  std::string bytes;
  std::string error;
};

// Reads `path` to the end (or the first error) in reads of `chunk` bytes.
ReadAll read_all(const std::string& path, unsigned chunk = 1 << 20) {
  GzInput input(path);
  REQUIRE(input.is_open());
  ReadAll out;
  std::string buffer(chunk, '\0');
  for (long n; (n = input.read(buffer.data(), chunk, out.error)) != 0;) {
    if (n < 0) break;
    out.bytes.append(buffer.data(), static_cast<std::size_t>(n));
  }
  return out;
}

// Text like an event log: lines of JSON-ish words, compressible but not trivially.
std::string log_like(std::size_t bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text;
  while (text.size() < bytes) {
    text +=
        R"({"worker_id":)" + std::to_string(rng() % 1000) + R"(,"event":{"event_id":)" + std::to_string(rng()) + "}}\n";
  }
  return text;
}

}  // namespace

TEST_CASE("a gzip log is inflated to exactly what was compressed, whatever its name and the read sizes") {
  TempDir dir;
  const std::string text = log_like(5 << 20, 1);   // several of the reader's 1 MiB input blocks
  const std::string path = dir.file("log.jsonl");  // no .gz: the bytes decide
  const std::string member = gzip_member(text);
  write_bytes(path, member);
  {
    GzInput input(path);
    REQUIRE(input.is_open());
    CHECK(input.compressed());
    CHECK(input.size() == member.size());
    std::string error;
    std::string got;
    std::string buffer(65536, '\0');
    for (long n; (n = input.read(buffer.data(), static_cast<unsigned>(buffer.size()), error)) > 0;) {
      got.append(buffer.data(), static_cast<std::size_t>(n));
    }
    CHECK(error.empty());
    CHECK(got == text);
    CHECK(input.offset() == member.size());  // progress reaches the file's size
  }
  for (const unsigned chunk : {1u, 4096u, 3u << 20}) {
    CAPTURE(chunk);
    if (chunk == 1) {  // byte by byte on a smaller log: every state boundary of the inflater
      const std::string small = log_like(200000, 2);
      write_bytes(dir.file("small"), gzip_member(small, 1));
      const ReadAll r = read_all(dir.file("small"), chunk);
      CHECK(r.error.empty());
      CHECK(r.bytes == small);
      continue;
    }
    const ReadAll r = read_all(path, chunk);
    CHECK(r.error.empty());
    CHECK(r.bytes == text);
  }
}

TEST_CASE("concatenated gzip members are read one after another, as gzip -d does") {
  TempDir dir;
  const std::string a = log_like(3 << 20, 3);
  const std::string b = log_like(100, 4);
  write_bytes(dir.file("multi.gz"), gzip_member(a) + gzip_member("") + gzip_member(b, 1));
  const ReadAll r = read_all(dir.file("multi.gz"));
  CHECK(r.error.empty());
  CHECK(r.bytes == a + b);
}

TEST_CASE("a truncated or corrupt gzip log, or bytes after its end, is a read error, not a short read") {
  TempDir dir;
  const std::string text = log_like(2 << 20, 5);
  const std::string member = gzip_member(text);
  SUBCASE("truncated") {
    for (const std::size_t keep : {std::size_t{5}, member.size() / 2, member.size() - 4}) {
      CAPTURE(keep);
      write_bytes(dir.file("cut.gz"), member.substr(0, keep));
      const ReadAll r = read_all(dir.file("cut.gz"));
      CHECK(r.error == "gzip: unexpected end of file (truncated)");
      CHECK(r.bytes.size() <= text.size());  // a cut in the trailer leaves the data whole, still an error
    }
  }
  SUBCASE("checksum") {
    std::string bad = member;
    bad[bad.size() - 6] = static_cast<char>(bad[bad.size() - 6] ^ 0x5a);  // the trailer's CRC-32
    write_bytes(dir.file("crc.gz"), bad);
    CHECK(read_all(dir.file("crc.gz")).error == "gzip: checksum mismatch (corrupt data)");
  }
  SUBCASE("corrupt data") {
    std::string bad = member;
    for (std::size_t i = 100; i < 400; ++i) bad[i] = static_cast<char>(0xff);
    write_bytes(dir.file("bad.gz"), bad);
    const ReadAll r = read_all(dir.file("bad.gz"));
    CHECK(r.error.rfind("gzip: ", 0) == 0);
    CHECK(r.bytes != text);
  }
  SUBCASE("reserved header flags, in the first member or a later one") {
    // Found by fuzz/gz_input_fuzz.cpp: ISA-L reads such a member; zlib and gzip -d reject it.
    std::string flagged = member;
    flagged[3] = static_cast<char>(flagged[3] | 0x80);
    write_bytes(dir.file("flags.gz"), flagged);
    CHECK(read_all(dir.file("flags.gz")).error == "gzip: reserved header flags set (corrupt data, or not gzip)");
    write_bytes(dir.file("flags2.gz"), member + flagged);
    const ReadAll r = read_all(dir.file("flags2.gz"));
    CHECK(r.error == "gzip: reserved header flags set (corrupt data, or not gzip)");
    CHECK(r.bytes == text);  // the first member was read whole
  }
  SUBCASE("trailing bytes") {
    write_bytes(dir.file("tail.gz"), member + std::string(16, '\0'));
    const ReadAll r = read_all(dir.file("tail.gz"));
    CHECK(r.error == "gzip: bytes after the end of the compressed data that are not another gzip member");
    CHECK(r.bytes == text);  // everything before them was read
  }
}

TEST_CASE("plain input passes through unchanged, including inputs shorter than gzip's magic") {
  TempDir dir;
  for (const std::string& text :
       {std::string(), std::string("{"), std::string("\x1f not gzip\n"), log_like(3 << 20, 6)}) {
    CAPTURE(text.size());
    write_bytes(dir.file("plain.gz"), text);  // a lying name
    {
      GzInput input(dir.file("plain.gz"));
      REQUIRE(input.is_open());
      CHECK_FALSE(input.compressed());
    }
    const ReadAll r = read_all(dir.file("plain.gz"), 4096);
    CHECK(r.error.empty());
    CHECK(r.bytes == text);
  }
}

TEST_CASE("a missing file does not open and errno says why") {
  GzInput input("/nonexistent/kvidx-no-such-log.jsonl");
  CHECK_FALSE(input.is_open());
  CHECK(errno == ENOENT);
}

TEST_CASE("a gzip log read from a pipe is inflated like the file") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const std::string text = log_like(3 << 20, 7);
  const std::string member = gzip_member(text);
  std::string got;
  std::string error;
  {
    GzInput input("/proc/self/fd/" + std::to_string(fds[0]));
    REQUIRE(input.is_open());
    std::thread writer([&] {
      std::size_t sent = 0;
      while (sent < member.size()) {
        const ssize_t n = write(fds[1], member.data() + sent, std::min<std::size_t>(member.size() - sent, 7000));
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
      }
      close(fds[1]);
    });
    CHECK(input.compressed());
    std::string buffer(1 << 20, '\0');
    for (long n; (n = input.read(buffer.data(), static_cast<unsigned>(buffer.size()), error)) > 0;) {
      got.append(buffer.data(), static_cast<std::size_t>(n));
    }
    writer.join();
  }
  close(fds[0]);
  CHECK(error.empty());
  CHECK(got == text);
}

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
