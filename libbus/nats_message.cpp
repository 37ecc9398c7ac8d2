#include "libbus/nats_message.h"

#include <charconv>
#include <string>
#include <utility>

namespace kvidx::bus {

Message& Message::operator=(Message&& other) noexcept {
  if (this != &other) {
    if (msg_ != nullptr) natsMsg_Destroy(msg_);
    msg_ = std::exchange(other.msg_, nullptr);
  }
  return *this;
}

Message::~Message() {
  if (msg_ != nullptr) natsMsg_Destroy(msg_);
}

BusResult<Message> Message::create(std::string_view subject, std::string_view data, std::string_view reply) {
  const std::string subj(subject);
  const std::string rep(reply);
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subj.c_str(), rep.empty() ? nullptr : rep.c_str(), data.data(),
                                static_cast<int>(data.size()));
  if (s != NATS_OK) return nats_error(s, "natsMsg_Create");
  return Message(msg);
}

std::string_view Message::subject() const {
  const char* s = msg_ ? natsMsg_GetSubject(msg_) : nullptr;
  return s ? std::string_view(s) : std::string_view();
}

std::string_view Message::reply() const {
  const char* s = msg_ ? natsMsg_GetReply(msg_) : nullptr;
  return s ? std::string_view(s) : std::string_view();
}

std::string_view Message::data() const {
  if (msg_ == nullptr) return {};
  const char* d = natsMsg_GetData(msg_);
  const int len = natsMsg_GetDataLength(msg_);
  return d != nullptr && len > 0 ? std::string_view(d, static_cast<std::size_t>(len)) : std::string_view();
}

std::optional<std::string> Message::header(const char* key) const {
  const char* value = nullptr;
  if (msg_ == nullptr || natsMsgHeader_Get(msg_, key, &value) != NATS_OK || value == nullptr) return std::nullopt;
  return std::string(value);
}

BusStatus Message::set_header(const char* key, const char* value) {
  natsStatus s = natsMsgHeader_Set(msg_, key, value);
  if (s != NATS_OK) return nats_error(s, "natsMsgHeader_Set");
  return {};
}

BusResult<JsMetadata> Message::metadata() const {
  jsMsgMetaData* meta = nullptr;
  natsStatus s = natsMsg_GetMetaData(&meta, msg_);
  if (s != NATS_OK) return nats_error(s, "natsMsg_GetMetaData");
  JsMetadata out{meta->Sequence.Stream, meta->Sequence.Consumer, meta->NumDelivered, meta->NumPending};
  jsMsgMetaData_Destroy(meta);
  return out;
}

namespace {

// A number of a $JS.ACK reply subject: token `index_v1` of
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending> (9 tokens), or
// `index_v2` of the newer servers' $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.
// <stream seq>.<consumer seq>.<ts>.<pending>[.<random>] (11 or 12 tokens); 0 when absent or not a number.
std::uint64_t ack_subject_number(std::string_view reply_subject, std::size_t index_v1, std::size_t index_v2) {
  if (reply_subject.substr(0, 8) != "$JS.ACK.") return 0;
  std::string_view tokens[12];
  std::size_t count = 0;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = reply_subject.find('.', start);
    if (count == 12) return 0;
    tokens[count++] = reply_subject.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  std::string_view seq;
  if (count == 9)
    seq = tokens[index_v1];
  else if (count == 11 || count == 12)
    seq = tokens[index_v2];
  else
    return 0;
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(seq.data(), seq.data() + seq.size(), value);
  return ec == std::errc() && ptr == seq.data() + seq.size() ? value : 0;
}

}  // namespace

std::uint64_t Message::consumer_sequence() const { return ack_subject_number(reply(), 6, 8); }

std::uint64_t Message::stream_sequence() const { return ack_subject_number(reply(), 5, 7); }

}  // namespace kvidx::bus
