#include "libbus/nats_jetstream.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

namespace kvidx::bus {
namespace {

constexpr jsErrCode kStreamNameInUse = static_cast<jsErrCode>(10058);

StreamState state_of(const jsStreamInfo* info) {
  if (info == nullptr) return {};
  const int replicas =
      info->Config != nullptr && info->Config->Replicas > 0 ? static_cast<int>(info->Config->Replicas) : 1;
  return StreamState{info->State.Msgs, info->State.FirstSeq, info->State.LastSeq, replicas, 0};
}

ConsumerState state_of(const jsConsumerInfo* info) {
  if (info == nullptr) return {};
  return ConsumerState{info->Delivered.Stream, info->AckFloor.Stream, info->NumPending, info->NumAckPending};
}

void on_publish_answer(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error, void* closure) {
  auto* acks = static_cast<AsyncPublishAcks*>(closure);
  if (ack != nullptr) {
    acks->acked.fetch_add(1, std::memory_order_relaxed);
  } else {
    acks->failed.fetch_add(1, std::memory_order_relaxed);
    if (error != nullptr) {
      std::string text = natsStatus_GetText(error->Err);
      if (error->ErrText != nullptr && text != error->ErrText) text += std::string(": ") + error->ErrText;
      acks->record_error(std::move(text));
    }
  }
  natsMsg_Destroy(msg);  // NOTE: with an ack handler the message is ours to free
}

}  // namespace

std::string AsyncPublishAcks::first_error() const {
  std::lock_guard lock(mutex_);
  return first_error_;
}

void AsyncPublishAcks::record_error(std::string error) {
  std::lock_guard lock(mutex_);
  if (first_error_.empty()) first_error_ = std::move(error);
}

JetStream& JetStream::operator=(JetStream&& other) noexcept {
  if (this != &other) {
    if (js_ != nullptr) jsCtx_Destroy(js_);
    js_ = std::exchange(other.js_, nullptr);
    nc_ = std::exchange(other.nc_, nullptr);
    api_wait_ms_ = other.api_wait_ms_;
  }
  return *this;
}

JetStream::~JetStream() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
}

BusResult<JetStream> JetStream::create(Connection& connection, const JetStreamOptions& options) {
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = options.api_wait_ms;
  jo.PublishAsync.MaxPending = options.publish_async_max_pending;
  jo.PublishAsync.StallWait = options.publish_async_stall_wait_ms;
  if (options.publish_acks != nullptr) {
    jo.PublishAsync.AckHandler = on_publish_answer;
    jo.PublishAsync.AckHandlerClosure = options.publish_acks;
  }
  JetStream js;
  natsStatus s = natsConnection_JetStream(&js.js_, connection.raw(), &jo);
  if (s != NATS_OK) return nats_error(s, "natsConnection_JetStream");
  js.nc_ = connection.raw();
  js.api_wait_ms_ = options.api_wait_ms;
  return js;
}

BusError JetStream::fail(natsStatus status, jsErrCode code, std::string_view context) const {
  BusError error = js_error(status, code, context);
  const char* text = nullptr;
  if (status == NATS_TIMEOUT && nc_ != nullptr && natsConnection_GetLastError(nc_, &text) == NATS_NOT_PERMITTED) {
    error.status = NATS_NOT_PERMITTED;
    error.message += std::string(" (the server refused: ") + (text != nullptr ? text : "") + ")";
  }
  return error;
}

BusResult<StreamState> JetStream::ensure_stream(const StreamSpec& spec) {
  // NOTE: replicas started together on a fresh cluster create the same stream at once; while the
  // meta leader places it (and the new stream elects its leader) the API may time out for a few
  // seconds. A timed-out call is idempotent to repeat, so it is retried a few times, not fatal.
  auto state = ensure_stream_once(spec);
  for (int attempt = 1; !state.ok() && attempt < 4 && state.error().timed_out(); ++attempt) {
    spdlog::warn("{}; retrying", state.error().message);
    state = ensure_stream_once(spec);
  }
  return state;
}

BusResult<StreamState> JetStream::ensure_stream_once(const StreamSpec& spec) {
  std::vector<const char*> subjects;
  subjects.reserve(spec.subjects.size());
  for (const auto& subject : spec.subjects) subjects.push_back(subject.c_str());
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  sc.Name = spec.name.c_str();
  sc.Subjects = subjects.data();
  sc.SubjectsLen = static_cast<int>(subjects.size());
  sc.Storage = spec.file_storage ? js_FileStorage : js_MemoryStorage;
  if (spec.max_msgs_per_subject > 0) sc.MaxMsgsPerSubject = spec.max_msgs_per_subject;
  if (spec.max_age_ms > 0) sc.MaxAge = spec.max_age_ms * 1'000'000;
  if (spec.max_bytes > 0) sc.MaxBytes = spec.max_bytes;
  // NOTE: an update carries the whole config, and Replicas 0 means 1 to the server: an update that
  // left it unset would scale a replicated stream down to one copy. So the existing count is read
  // first and kept unless the spec asks for another.
  int previous_replicas = 0;
  {
    jsStreamInfo* existing = nullptr;
    jsErrCode info_code{};
    const natsStatus found = js_GetStreamInfo(&existing, js_, spec.name.c_str(), nullptr, &info_code);
    if (found == NATS_OK) {
      previous_replicas = state_of(existing).replicas;
      jsStreamInfo_Destroy(existing);
    } else if (found != NATS_NOT_FOUND) {
      return fail(found, info_code, "stream info " + spec.name);
    }
  }
  sc.Replicas = spec.replicas > 0 ? spec.replicas : (previous_replicas > 0 ? previous_replicas : spec.new_replicas);
  jsStreamInfo* info = nullptr;
  jsErrCode code{};
  natsStatus s = js_AddStream(&info, js_, &sc, nullptr, &code);
  if (s != NATS_OK && code == kStreamNameInUse) {
    // NOTE: the stream exists with a different config; update it rather than fail (idempotent start).
    code = {};
    s = js_UpdateStream(&info, js_, &sc, nullptr, &code);
  }
  if (s != NATS_OK) return fail(s, code, "create stream " + spec.name);
  StreamState state = state_of(info);
  state.previous_replicas = previous_replicas;
  const bool leaderless = info != nullptr && info->Cluster != nullptr &&
                          (info->Cluster->Leader == nullptr || info->Cluster->Leader[0] == '\0');
  jsStreamInfo_Destroy(info);
  // NOTE: on a cluster a stream just created (or being moved) answers its API (message get,
  // consumers) only once its replicas elected a leader; the first call after the create would
  // time out. So wait for one here (bounded by the API wait) before handing the stream out.
  if (leaderless) {
    if (auto led = wait_for_leader(spec.name); !led.ok()) return led.error();
  }
  return state;
}

BusStatus JetStream::wait_for_leader(const std::string& stream) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(3 * api_wait_ms_);
  while (true) {
    jsStreamInfo* info = nullptr;
    jsErrCode code{};
    const natsStatus s = js_GetStreamInfo(&info, js_, stream.c_str(), nullptr, &code);
    const bool led = s == NATS_OK && (info->Cluster == nullptr ||
                                      (info->Cluster->Leader != nullptr && info->Cluster->Leader[0] != '\0'));
    if (info != nullptr) jsStreamInfo_Destroy(info);
    if (led) return {};
    if (Clock::now() >= deadline) {
      return s != NATS_OK ? fail(s, code, "stream info " + stream)
                          : BusError{NATS_TIMEOUT, "stream " + stream + " has no leader (JetStream cluster)"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

BusResult<StreamState> JetStream::stream_state(std::string_view stream) {
  const std::string name(stream);
  jsStreamInfo* info = nullptr;
  jsErrCode code{};
  natsStatus s = js_GetStreamInfo(&info, js_, name.c_str(), nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "stream info " + name);
  StreamState state = state_of(info);
  jsStreamInfo_Destroy(info);
  return state;
}

BusStatus JetStream::delete_stream(std::string_view stream) {
  const std::string name(stream);
  jsErrCode code{};
  natsStatus s = js_DeleteStream(js_, name.c_str(), nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "delete stream " + name);
  return {};
}

BusStatus JetStream::purge(std::string_view stream, std::string_view subject, std::uint64_t keep) {
  const std::string name(stream);
  const std::string subj(subject);
  jsOptions o;
  jsOptions_Init(&o);
  if (!subj.empty()) o.Stream.Purge.Subject = subj.c_str();
  o.Stream.Purge.Keep = keep;
  jsErrCode code{};
  natsStatus s = js_PurgeStream(js_, name.c_str(), &o, &code);
  if (s != NATS_OK) return fail(s, code, "purge stream " + name);
  return {};
}

BusResult<ConsumerState> JetStream::ensure_consumer(std::string_view stream, const ConsumerSpec& spec) {
  const std::string name(stream);
  if (auto existing = consumer_state(stream, spec.durable); existing.ok()) return existing;
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = spec.durable.c_str();
  cc.AckPolicy = spec.ack_all ? js_AckAll : js_AckExplicit;
  cc.AckWait = spec.ack_wait_ms * 1'000'000;
  if (!spec.filter_subject.empty()) cc.FilterSubject = spec.filter_subject.c_str();
  if (spec.max_ack_pending > 0) cc.MaxAckPending = spec.max_ack_pending;
  if (spec.start_sequence > 0) {
    cc.DeliverPolicy = js_DeliverByStartSequence;
    cc.OptStartSeq = spec.start_sequence;
  }
  jsConsumerInfo* info = nullptr;
  jsErrCode code{};
  natsStatus s = js_AddConsumer(&info, js_, name.c_str(), &cc, nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "create consumer " + spec.durable + " on " + name);
  ConsumerState state = state_of(info);
  jsConsumerInfo_Destroy(info);
  return state;
}

BusResult<ConsumerState> JetStream::consumer_state(std::string_view stream, std::string_view durable) {
  const std::string name(stream);
  const std::string consumer(durable);
  jsConsumerInfo* info = nullptr;
  jsErrCode code{};
  natsStatus s = js_GetConsumerInfo(&info, js_, name.c_str(), consumer.c_str(), nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "consumer info " + consumer + " on " + name);
  ConsumerState state = state_of(info);
  jsConsumerInfo_Destroy(info);
  return state;
}

BusStatus JetStream::delete_consumer(std::string_view stream, std::string_view durable) {
  const std::string name(stream);
  const std::string consumer(durable);
  jsErrCode code{};
  natsStatus s = js_DeleteConsumer(js_, name.c_str(), consumer.c_str(), nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "delete consumer " + consumer + " on " + name);
  return {};
}

BusResult<PublishAck> JetStream::publish(std::string_view subject, std::string_view data) {
  const std::string subj(subject);
  jsPubAck* pa = nullptr;
  jsErrCode code{};
  natsStatus s = js_Publish(&pa, js_, subj.c_str(), data.data(), static_cast<int>(data.size()), nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "JetStream publish to " + subj);
  PublishAck ack{pa->Stream ? pa->Stream : "", pa->Sequence, pa->Duplicate};
  jsPubAck_Destroy(pa);
  return ack;
}

BusResult<PublishAck> JetStream::publish(Message& message) {
  jsPubAck* pa = nullptr;
  jsErrCode code{};
  natsStatus s = js_PublishMsg(&pa, js_, message.raw(), nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "JetStream publish to " + std::string(message.subject()));
  PublishAck ack{pa->Stream ? pa->Stream : "", pa->Sequence, pa->Duplicate};
  jsPubAck_Destroy(pa);
  return ack;
}

BusStatus JetStream::publish_async(std::string_view subject, std::string_view data) {
  const std::string subj(subject);
  natsStatus s = js_PublishAsync(js_, subj.c_str(), data.data(), static_cast<int>(data.size()), nullptr);
  if (s != NATS_OK) return nats_error(s, "JetStream async publish to " + subj);
  return {};
}

BusStatus JetStream::publish_async_complete(std::int64_t timeout_ms) {
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = timeout_ms;
  natsStatus s = js_PublishAsyncComplete(js_, &po);
  if (s != NATS_OK) return nats_error(s, "js_PublishAsyncComplete");
  return {};
}

BusResult<Message> JetStream::get_message(std::string_view stream, std::uint64_t sequence) {
  const std::string name(stream);
  natsMsg* msg = nullptr;
  jsErrCode code{};
  natsStatus s = js_GetMsg(&msg, js_, name.c_str(), sequence, nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "get message " + std::to_string(sequence) + " of " + name);
  return Message(msg);
}

BusResult<Message> JetStream::get_last_message(std::string_view stream, std::string_view subject) {
  const std::string name(stream);
  const std::string subj(subject);
  natsMsg* msg = nullptr;
  jsErrCode code{};
  natsStatus s = js_GetLastMsg(&msg, js_, name.c_str(), subj.c_str(), nullptr, &code);
  if (s != NATS_OK) return fail(s, code, "get last message on " + subj + " of " + name);
  return Message(msg);
}

}  // namespace kvidx::bus
