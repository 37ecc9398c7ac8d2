// libFuzzer target: the RouterEvent decoders (event_codec.h) on arbitrary bytes.
// Checks, for one input as a single event, as a message (event or batch) and as an event log line:
//  - no crash, leak or UB (ASan + UBSan);
//  - every rejection has a non-empty reason, one line of printable ASCII of bounded length (input
//    quoted in it is an excerpt: untrusted_text.h);
//  - the fast path (fast_event_parser.h) only accepts what the DOM decoder accepts, with the same
//    result, and the public decoder gives the DOM decoder's verdict and message;
//  - whatever is accepted re-encodes to JSON that decodes to the same events.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "libcodec/event_codec.h"
#include "libcodec/fast_event_parser.h"

namespace {

[[noreturn]] void fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "event_decoder_fuzz: %s\ninput: %.*s\n", what, static_cast<int>(input.size()), input.data());
  std::abort();
}

template <class T>
void check_rejection(const kvidx::Decoded<T>& decoded, std::string_view input) {
  if (decoded.ok()) return;
  if (decoded.error().reason.empty()) fail("rejection without a reason", input);
  const std::string message = decoded.error().message();
  if (message.size() > 1024) fail("rejection reason longer than 1 KiB", input);
  for (const char c : message) {
    if (c < 0x20 || c > 0x7e) fail("rejection reason with a byte outside printable ASCII", input);
  }
}

template <class T>
void check_same_verdict(const kvidx::Decoded<T>& a, const kvidx::Decoded<T>& b, std::string_view input) {
  if (a.ok() != b.ok()) fail("public decoder and DOM decoder disagree on the verdict", input);
  if (!a.ok() && a.error().message() != b.error().message())
    fail("public decoder and DOM decoder disagree on the reason", input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  kvidx::DecodeLimits limits;
  limits.max_blocks_per_event = 256;  // small limits so the fuzzer reaches them
  limits.max_events_per_batch = 16;
  limits.max_nesting_depth = 12;

  {  // one event or a batch
    const auto dom = kvidx::decode_router_events_dom(input, limits);
    check_rejection(dom, input);
    std::vector<kvidx::RouterEvent> fast;
    if (kvidx::fast_codec::try_decode_router_events(input, limits, fast)) {
      if (!dom.ok()) fail("fast path accepted what the DOM decoder rejects", input);
      if (fast != dom.value()) fail("fast path and DOM decoder decoded different events", input);
    }
    const auto full = kvidx::decode_router_events(input, limits);
    check_same_verdict(full, dom, input);
    if (full.ok()) {
      const std::string again = kvidx::encode_router_events(full.value());
      kvidx::DecodeLimits roomy = limits;
      roomy.max_message_bytes = again.size() + 1;
      const auto round = kvidx::decode_router_events(again, roomy);
      if (!round.ok() || round.value() != full.value())
        fail("re-encoded events do not decode to the same events", input);
    }
  }
  {  // a single event
    const auto dom = kvidx::decode_router_event_dom(input, limits);
    check_rejection(dom, input);
    kvidx::RouterEvent fast;
    if (kvidx::fast_codec::try_decode_router_event(input, limits, fast)) {
      if (!dom.ok() || fast != dom.value()) fail("fast path and DOM decoder disagree on a single event", input);
    }
    check_same_verdict(kvidx::decode_router_event(input, limits), dom, input);
  }
  {  // an event log line (bare event or capture wrapper)
    const auto dom = kvidx::decode_event_log_line_dom(input, limits);
    check_rejection(dom, input);
    kvidx::EventLogLine fast;
    if (kvidx::fast_codec::try_decode_event_log_line(input, limits, fast)) {
      if (!dom.ok()) fail("fast path accepted a log line the DOM decoder rejects", input);
      if (fast.event != dom.value().event || fast.subject != dom.value().subject ||
          fast.ts.has_value() != dom.value().ts.has_value()) {
        fail("fast path and DOM decoder disagree on a log line", input);
      }
    }
    check_same_verdict(kvidx::decode_event_log_line(input, limits), dom, input);
  }
  return 0;
}
