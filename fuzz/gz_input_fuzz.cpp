// libFuzzer target: GzInput (replay/gz_input.h), the event-log readers' input, on arbitrary bytes.
// The first byte picks the read size; the rest is the file (an in-memory file, opened by path as
// `kvidx replay --events` opens one). Checks:
//  - no crash, hang, leak or UB (ASan + UBSan; libFuzzer's -timeout);
//  - a read never returns more than asked, a failed read says why (one line of bounded length);
//  - input that is not gzip (no magic bytes) reads back byte for byte;
//  - gzip input that GzInput reads to its end without an error, zlib reads too (every member, the
//    whole input) and to the same bytes: a corrupt, truncated or trailing-garbage file is never
//    read as a silently different log.
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "replay/gz_input.h"

namespace {

// Inflate bombs (8 KiB of input can inflate to megabytes): reading stops past this, more so with
// tiny reads, and the output is then not compared.
constexpr std::size_t kMaxOutput = 1u << 20;
constexpr std::size_t kMaxOutputOfTinyReads = 64u << 10;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "gz_input_fuzz: %s\n", what);
  std::abort();
}

// zlib's reading of `data` as gzip members back to back; nullopt if any member is bad, the input
// ends inside one, or anything follows the last that is not a member.
std::optional<std::string> zlib_read(std::string_view data) {
  std::string out;
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) fail("zlib inflateInit2 failed");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  char buffer[16384];
  bool ok = false;
  while (true) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    const int code = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - stream.avail_out);
    if (out.size() > kMaxOutput) break;
    if (code == Z_STREAM_END) {
      if (stream.avail_in == 0) {
        ok = true;
        break;
      }
      if (inflateReset(&stream) != Z_OK) break;
      continue;
    }
    if (code != Z_OK) break;  // Z_BUF_ERROR here: the input ended inside a member
  }
  inflateEnd(&stream);
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  if (size == 0) return 0;
  static const unsigned kReadSizes[] = {1, 7, 512, 4096, 65536, 1u << 20};
  const unsigned read_size = kReadSizes[bytes[0] % (sizeof kReadSizes / sizeof kReadSizes[0])];
  const std::string_view data(reinterpret_cast<const char*>(bytes + 1), size - 1);

  const int fd = memfd_create("gz_input_fuzz", 0);
  if (fd < 0) fail("memfd_create failed");
  if (!data.empty() && write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) fail("write failed");
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  std::string out;
  std::string error;
  bool read_to_end = false;
  {
    kvidx::GzInput input(path);
    if (!input.is_open()) fail("GzInput could not open an in-memory file");
    static std::string buffer(std::size_t{1} << 20, '\0');  // NOTE: once: the largest read size
    const std::size_t max_output = read_size < 512 ? kMaxOutputOfTinyReads : kMaxOutput;
    while (out.size() <= max_output) {
      const long n = input.read(buffer.data(), read_size, error);
      if (n < 0) {
        if (error.empty() || error.size() > 512 || error.find('\n') != std::string::npos) {
          fail("a failed read without a one-line reason");
        }
        break;
      }
      if (static_cast<unsigned long>(n) > read_size) fail("a read returned more than asked");
      if (n == 0) {
        read_to_end = true;
        break;
      }
      out.append(buffer.data(), static_cast<std::size_t>(n));
    }
  }
  close(fd);

  const bool gzip =
      data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b;
  if (!gzip) {
    if (!read_to_end || out != data) fail("plain input did not read back byte for byte");
    return 0;
  }
  if (read_to_end) {
    const std::optional<std::string> reference = zlib_read(data);
    if (!reference) fail("GzInput read to the end a gzip input zlib rejects");
    if (*reference != out) fail("GzInput and zlib inflate a gzip input to different bytes");
  }
  return 0;
}
