// libFuzzer target: the request/reply decoders (query_codec.h) on arbitrary bytes: score requests
// (local_hashes or token_ids), score replies, remove_worker requests and error replies.
// No crash, leak or UB; every rejection has a non-empty reason, one line of printable ASCII of
// bounded length; accepted requests re-encode to JSON that decodes to the same request.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "libcodec/query_codec.h"

namespace {

[[noreturn]] void fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "query_decoder_fuzz: %s\ninput: %.*s\n", what, static_cast<int>(input.size()), input.data());
  std::abort();
}

template <class T>
void check_reason(const kvidx::Decoded<T>& decoded, const char* empty, std::string_view input) {
  if (decoded.ok()) return;
  if (decoded.error().reason.empty()) fail(empty, input);
  const std::string message = decoded.error().message();
  if (message.size() > 1024) fail("rejection reason longer than 1 KiB", input);
  for (const char c : message) {
    if (c < 0x20 || c > 0x7e) fail("rejection reason with a byte outside printable ASCII", input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  kvidx::QueryLimits limits;
  limits.max_hashes = 64;  // small so the fuzzer reaches it (token_ids: 64 x 64)

  const auto request = kvidx::decode_score_request(input, limits);
  check_reason(request, "score request rejected without a reason", input);
  if (request.ok()) {
    const auto round = kvidx::decode_score_request(kvidx::encode_score_request(request.value()), limits);
    if (!round.ok() || round.value().local_hashes != request.value().local_hashes ||
        round.value().early_exit != request.value().early_exit) {
      fail("re-encoded score request does not decode to the same request", input);
    }
  }

  const auto reply = kvidx::decode_score_reply(input, limits);
  check_reason(reply, "score reply rejected without a reason", input);
  if (reply.ok()) {
    const auto round = kvidx::decode_score_reply(kvidx::encode_score_reply(reply.value()), limits);
    if (!round.ok() || !(round.value() == reply.value())) fail("re-encoded score reply differs", input);
  }

  const auto removal = kvidx::decode_remove_worker_request(input);
  check_reason(removal, "remove_worker request rejected without a reason", input);
  if (removal.ok()) {
    const auto round = kvidx::decode_remove_worker_request(kvidx::encode_remove_worker_request(removal.value()));
    if (!round.ok() || !(round.value() == removal.value())) fail("re-encoded remove_worker request differs", input);
  }

  if (const auto error = kvidx::decode_error_reply(input)) {
    const auto round = kvidx::decode_error_reply(kvidx::encode_error_reply(*error));
    if (!round || !(*round == *error)) fail("re-encoded error reply differs", input);
  }
  return 0;
}
