// Replies larger than the NATS server's max_payload (kv.query.scores or kv.admin.workers over tens
// of thousands of streams). nats.c refuses to publish them, so without this they vanished and the
// requester timed out. A plain request/reply client takes exactly one message, so:
//   - a reply that fits is one plain message, as always;
//   - a request carrying the header `Kvidx-Chunked: 1` accepts a larger reply as consecutive byte
//     slices of its JSON (header `Kvidx-Reply: chunk`, each under max_payload), then an end marker
//     (header `Kvidx-Reply: end`, body {"end":true,"bytes":B,"chunks":N}, libcodec/chunked_reply_codec.h); the
//     requester concatenates the slices and checks B and N (`kvidx score` / `kvidx stats` do);
//   - any other request gets one {"error":{"code":"reply_too_large","message":...}} naming the
//     sizes and these two ways out.
// So a requester always gets an answer: the reply, or an error that says what to do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "libbus/nats_connection.h"
#include "libbus/nats_error.h"
#include "libbus/nats_message.h"

namespace kvidx::bus {

inline constexpr const char* kAcceptChunksHeader = "Kvidx-Chunked";  // request header, value "1"
inline constexpr const char* kReplyPartHeader = "Kvidx-Reply";       // "chunk" or "end"

enum class ReplyShape : std::uint8_t { plain, chunked, too_large };

// Server side: answers `request` (which must have a reply subject) with `body` as described above,
// reading the connection's max_payload now (it can change on a reconnect). `subject_hint` names
// what was asked, for the too-large error. Returns the shape sent, or the publish error.
BusResult<ReplyShape> send_reply(Connection& conn, const Message& request, std::string_view body,
                                 std::string_view subject_hint);

// Client side: sends `body` on `subject` with `Kvidx-Chunked: 1` and returns the whole reply body,
// reassembled when chunked. `timeout_ms` bounds the wait for each message. Errors: status
// NATS_NO_RESPONDERS or NATS_TIMEOUT when nothing answered at all; NATS_MISMATCH when a chunked
// reply came incomplete (the end marker's counts differ from what arrived, or it never came).
BusResult<std::string> request_accepting_chunks(Connection& conn, std::string_view subject, std::string_view body,
                                                std::int64_t timeout_ms);

}  // namespace kvidx::bus
