// Rejected event messages of Ingest go to <prefix>.deadletter as received (see ingest.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "libbus/ingest.h"
#include "libcodec/untrusted_text.h"

namespace kvidx::bus {

// A rejected message goes to <prefix>.deadletter as received, with its reason (Kvidx-Reason: a
// bounded, printable text) and original subject (Kvidx-Subject). `kind` ("decode", "subject",
// "stream_limit") groups the rate-limited log lines. kvidx_dead_letters_total counts what was
// published: a message that cannot be republished whole under the server's max_payload (it
// arrived near the limit, and the headers come on top) is published with its body cut to fit
// and Kvidx-Truncated: <original bytes>, counted as published and as truncated. Only a dead
// letter that cannot be published at all (the headers alone exceed max_payload, or the publish
// fails) counts in kvidx_dead_letter_failures_total{reason} instead.
void Ingest::dead_letter(std::string_view subject, std::string_view data, std::string_view kind,
                         const std::string& reason) {
  const std::string bounded = untrusted_excerpt(reason, kReasonBytes);
  if (const auto v = ctx_.warnings.admit(fmt::format("dead_letter:{}", kind)); v.log) {
    spdlog::warn("dead-lettered a message of {} bytes on {}: {}{}", data.size(), untrusted_excerpt(subject), bounded,
                 suppressed_note(v));
  }
  const std::string original_subject(subject);
  const std::string original_bytes = std::to_string(data.size());
  // NOTE: nats.c encodes headers as "NATS/1.0\r\n", "Key: value\r\n" each, then "\r\n", and the
  // server bounds headers + body by max_payload. The Kvidx-Truncated line is counted whether or
  // not it is sent, so a body cut to `room` always fits.
  const auto header_line = [](const char* key, const std::string& value) {
    return std::strlen(key) + 2 + value.size() + 2;
  };
  const std::size_t header_bytes = 10 + header_line(kDeadLetterReasonHeader, bounded) +
                                   header_line(kDeadLetterSubjectHeader, original_subject) +
                                   header_line(kDeadLetterTruncatedHeader, original_bytes) + 2;
  const auto max_payload = static_cast<std::size_t>(std::max<std::int64_t>(ctx_.ingest_conn.max_payload(), 0));
  if (header_bytes >= max_payload) {
    dead_letter_failed(too_large, subject,
                       fmt::format("its headers alone ({} bytes) exceed max_payload {}", header_bytes, max_payload));
    return;
  }
  const std::size_t room = max_payload - header_bytes;
  const bool truncated = data.size() > room;
  auto msg = Message::create(ctx_.subjects.deadletter(), truncated ? data.substr(0, room) : data);
  if (!msg.ok()) {
    dead_letter_failed(publish_error, subject, msg.error().message);
    return;
  }
  msg.value().set_header(kDeadLetterReasonHeader, bounded.c_str());
  msg.value().set_header(kDeadLetterSubjectHeader, original_subject.c_str());
  if (truncated) msg.value().set_header(kDeadLetterTruncatedHeader, original_bytes.c_str());
  if (auto s = ctx_.ingest_conn.publish(msg.value()); !s.ok()) {
    dead_letter_failed(s.error().status == NATS_MAX_PAYLOAD ? too_large : publish_error, subject, s.error().message);
    return;
  }
  counters_.dead_letters_total->inc();
  if (truncated) counters_.dead_letters_truncated->inc();
}

void Ingest::dead_letter_failed(DeadLetterFailure reason, std::string_view subject, const std::string& why) {
  counters_.dead_letter_failures[reason]->inc();
  if (const auto v = ctx_.warnings.admit("dead_letter_failure"); v.log) {
    spdlog::warn("could not publish the dead letter of a message on {}: {}{}", untrusted_excerpt(subject),
                 untrusted_excerpt(why, kReasonBytes), suppressed_note(v));
  }
}

}  // namespace kvidx::bus
