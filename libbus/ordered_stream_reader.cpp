#include "libbus/ordered_stream_reader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace kvidx::bus {

OrderedStreamReader::OrderedStreamReader(Connection& conn, JetStream& js, std::string stream, ConsumerSpec spec)
    : conn_(&conn), js_(&js), stream_(std::move(stream)), spec_(std::move(spec)) {
  last_ = spec_.start_sequence == 0 ? 0 : spec_.start_sequence - 1;
}

OrderedStreamReader::OrderedStreamReader(OrderedStreamReader&& other) noexcept
    : conn_(other.conn_),
      js_(other.js_),
      stream_(std::move(other.stream_)),
      spec_(std::move(other.spec_)),
      pull_(std::move(other.pull_)),
      last_(other.last_),
      needs_recreate_(other.needs_recreate_),
      accept_hole_(other.accept_hole_),
      last_consumer_(other.last_consumer_),
      last_progress_(other.last_progress_),
      resets_(other.resets_.load()),
      holes_(other.holes_.load()) {}

BusResult<OrderedStreamReader> OrderedStreamReader::open(Connection& conn, JetStream& js, std::string stream,
                                                         ConsumerSpec spec) {
  OrderedStreamReader reader(conn, js, std::move(stream), std::move(spec));
  if (auto s = reader.recreate(); !s.ok()) return s.error();
  return reader;
}

BusStatus OrderedStreamReader::recreate() {
  // A missing durable is fine here (first start, or deleted by someone): it is created below.
  js_->delete_consumer(stream_, spec_.durable);
  ConsumerSpec spec = spec_;
  spec.start_sequence = last_ + 1;
  if (auto c = js_->ensure_consumer(stream_, spec); !c.ok()) return c.error();
  auto pull = PullConsumer::bind(*conn_, stream_, spec_.durable);
  if (!pull.ok()) return pull.error();
  pull_ = std::move(pull).value();
  needs_recreate_ = false;
  accept_hole_ = true;
  last_consumer_ = 0;  // a new durable numbers its deliveries from 1
  return {};
}

void OrderedStreamReader::check_consumer_when_idle() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_progress_ < kIdleConsumerCheck) return;
  last_progress_ = now;
  // NOTE: a pull request to a durable that no longer exists gets no answer at all (JetStream's API
  // import takes the request and drops it), so an idle reader asks whether its durable is still there.
  auto state = js_->consumer_state(stream_, spec_.durable);
  if (!state.ok() && state.error().status == NATS_NOT_FOUND) {
    spdlog::warn("events consumer {} no longer exists on {}; re-creating it from stream sequence {}", spec_.durable,
                 stream_, last_ + 1);
    needs_recreate_ = true;
  }
}

BusResult<std::vector<Message>> OrderedStreamReader::fetch(int batch, std::int64_t timeout_ms) {
  if (needs_recreate_) {
    if (auto s = recreate(); !s.ok()) return s.error();
    resets_.fetch_add(1, std::memory_order_relaxed);
    spdlog::info("events consumer {} re-created to deliver from stream sequence {}", spec_.durable, last_ + 1);
  }
  auto fetched = pull_.fetch(batch, timeout_ms);
  if (!fetched.ok()) {
    // NOTE: unless merely disconnected, the durable may be gone (deleted, or lost by the server):
    // re-create it at the next fetch; if JetStream is not back yet that fails and the caller retries.
    if (fetched.error().status != NATS_CONNECTION_DISCONNECTED) needs_recreate_ = true;
    return fetched.error();
  }
  std::vector<Message>& msgs = fetched.value();
  if (msgs.empty()) {
    check_consumer_when_idle();
    return fetched;
  }
  last_progress_ = std::chrono::steady_clock::now();
  const bool filtered = !spec_.filter_subject.empty();
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const std::uint64_t seq = msgs[i].stream_sequence();
    if (seq == 0) continue;  // not from the stream: passed on
    if (filtered) {
      // NOTE: a filtered durable skips the other subjects' stream sequences, so a delivery lost in
      // flight shows as a jump of the consumer (delivery) sequence, which counts every delivery.
      const std::uint64_t delivery = msgs[i].consumer_sequence();
      if (delivery > last_consumer_ + 1) {
        spdlog::warn(
            "events consumer {}: delivery {} arrived while {} was expected; re-reading from stream sequence {}",
            spec_.durable, delivery, last_consumer_ + 1, last_ + 1);
        msgs.erase(msgs.begin() + static_cast<std::ptrdiff_t>(i), msgs.end());
        needs_recreate_ = true;
        break;
      }
      last_consumer_ = std::max(last_consumer_, delivery);
      if (seq > last_) last_ = seq;  // a jump in stream sequence is another subject's message
      continue;
    }
    if (seq <= last_) continue;  // a redelivery: passed on
    if (seq > last_ + 1) {
      if (!accept_hole_) {
        // Lost in flight: drop this and everything after it; the re-created durable redelivers them.
        spdlog::warn("events consumer {}: stream sequence {} arrived while {} was expected; re-reading from {}",
                     spec_.durable, seq, last_ + 1, last_ + 1);
        msgs.erase(msgs.begin() + static_cast<std::ptrdiff_t>(i), msgs.end());
        needs_recreate_ = true;
        break;
      }
      holes_.fetch_add(seq - last_ - 1, std::memory_order_relaxed);
      spdlog::warn("events stream {}: sequences {}..{} no longer exist (retention or deletes); reading on from {}",
                   stream_, last_ + 1, seq - 1, seq);
    }
    accept_hole_ = false;
    last_ = seq;
  }
  return fetched;
}

}  // namespace kvidx::bus
