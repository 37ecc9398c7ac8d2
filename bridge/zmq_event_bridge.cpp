#include "bridge/zmq_event_bridge.h"

#include <spdlog/spdlog.h>

#include <deque>
#include <iterator>
#include <limits>
#include <optional>
#include <utility>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace kvidx::bridge {
namespace {

constexpr std::uint64_t kReplayEndSeq = std::numeric_limits<std::uint64_t>::max();  // -1 as 8 BE bytes
constexpr std::chrono::milliseconds kPollInterval{50};

std::optional<std::uint64_t> read_seq(const zmq::message_t& frame) {
  if (frame.size() != 8) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(frame.data());
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | p[i];
  return value;
}

std::span<const std::byte> bytes_of(const zmq::message_t& frame) {
  return {static_cast<const std::byte*>(frame.data()), frame.size()};
}

enum class Source : std::uint8_t { live, replay, drained };

}  // namespace

struct ZmqEventBridge::Impl {
  Impl(ZmqBridgeConfig c, RouterEventSink& s) : config(std::move(c)), sink(s), converter(config.conversion) {}

  ZmqBridgeConfig config;
  RouterEventSink& sink;
  // NOTE: the context is declared before the sockets so it is destroyed after them.
  zmq::context_t context{1};
  zmq::socket_t sub;
  std::optional<zmq::socket_t> dealer;
  std::thread thread;
  std::atomic<bool> stopping{false};

  mutable std::mutex shared_mutex;
  ZmqBridgeStats shared_stats;  // guarded by shared_mutex: a copy published by the loop

  // Loop thread only.
  VllmEventConverter converter;
  ZmqBridgeStats stats;
  std::optional<std::uint64_t> last;
  bool replaying = false;
  std::uint64_t replay_target = 0;  // first live seq held in `buffered`
  std::chrono::steady_clock::time_point replay_deadline;
  std::deque<std::pair<std::uint64_t, zmq::message_t>> buffered;
  std::vector<RouterEvent> out;

  void connect_dealer() {
    dealer.emplace(context, zmq::socket_type::dealer);
    dealer->set(zmq::sockopt::linger, 0);
    dealer->connect(config.replay_endpoint);
  }

  void publish_stats() {
    stats.conversion = converter.stats();
    stats.have_last_seq = last.has_value();
    stats.last_seq = last.value_or(0);
    stats.replaying = replaying;
    std::lock_guard lock(shared_mutex);
    shared_stats = stats;
  }

  void hand_to_sink() {
    if (out.empty()) return;
    if (auto status = sink.deliver(out); !status) {
      if (stats.sink_failures++ < 10) spdlog::warn("bridge: delivery of {} events failed: {}", out.size(), status.error());
    } else {
      stats.router_events += out.size();
    }
    out.clear();
  }

  // Batches lost for good: ids skipped so kvidx sees the gap; optional re-sync by `cleared`.
  void lose(std::uint64_t count) {
    stats.unrecovered_batches += count;
    converter.skip_event_ids(count, config.conversion.default_dp_rank);
    if (config.clear_on_gap) {
      for (DpRank rank : converter.known_ranks()) out.push_back(converter.make_cleared(rank));
      hand_to_sink();
    }
  }

  void deliver(std::uint64_t seq, const zmq::message_t& payload, Source source) {
    last = seq;
    auto batch = decode_vllm_event_batch(bytes_of(payload), config.limits);
    if (!batch) {
      if (stats.malformed_frames++ < 10) spdlog::warn("bridge: undecodable batch seq {}: {}", seq, batch.error().message());
      converter.skip_event_ids(1, config.conversion.default_dp_rank);
      return;
    }
    converter.convert(batch.value(), out);
    hand_to_sink();
    ++stats.batches_delivered;
    if (source == Source::replay) ++stats.replayed_batches;
  }

  void start_replay(std::uint64_t from, std::uint64_t target, zmq::message_t payload) {
    ++stats.replays_requested;
    replaying = true;
    replay_target = target;
    replay_deadline = std::chrono::steady_clock::now() + config.replay_timeout;
    buffered.emplace_back(target, std::move(payload));
    unsigned char request[8];
    for (int i = 0; i < 8; ++i) request[i] = static_cast<unsigned char>(from >> (56 - 8 * i));
    // NOTE: the empty first frame is the delimiter a REQ socket would add; vLLM's ROUTER expects
    // [identity, empty, start] and answers with the same envelope.
    const bool sent = dealer->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
                      dealer->send(zmq::buffer(request, sizeof(request)), zmq::send_flags::dontwait);
    spdlog::info("bridge: {} seq {}: replay requested from seq {}", last ? "gap before" : "late start at", target, from);
    if (!sent) finish_replay(false);
  }

  void finish_replay(bool completed) {
    replaying = false;
    if (!completed) {
      ++stats.replay_failures;
      spdlog::warn("bridge: replay did not complete; delivering the {} buffered batches", buffered.size());
      connect_dealer();  // drop any late answer to the abandoned request
    }
    while (!buffered.empty()) {
      auto [seq, payload] = std::move(buffered.front());
      buffered.pop_front();
      accept(seq, std::move(payload), Source::drained);
    }
  }

  void accept(std::uint64_t seq, zmq::message_t payload, Source source) {
    if (!last) {
      if (source == Source::live && dealer && config.catch_up_on_start && seq > 0) {
        start_replay(0, seq, std::move(payload));
        return;
      }
      deliver(seq, payload, source);
      return;
    }
    if (seq <= *last) {
      if (source != Source::live) {
        ++stats.duplicate_batches;
        return;
      }
      ++stats.restarts;
      spdlog::warn("bridge: engine sequence went back from {} to {}: engine restart, clearing", *last, seq);
      for (DpRank rank : converter.known_ranks()) out.push_back(converter.make_cleared(rank));
      hand_to_sink();
      last.reset();
      accept(seq, std::move(payload), source);
      return;
    }
    if (seq == *last + 1) {
      deliver(seq, payload, source);
      return;
    }
    const std::uint64_t missing = seq - *last - 1;
    if (source == Source::live) {
      ++stats.gaps;
      stats.missing_batches += missing;
      if (dealer) {
        start_replay(*last + 1, seq, std::move(payload));
        return;
      }
      spdlog::warn("bridge: {} batches missing before seq {} (no replay endpoint)", missing, seq);
    }
    lose(missing);
    deliver(seq, payload, source);
  }

  void on_live(std::vector<zmq::message_t>& frames) {
    ++stats.frames;
    std::optional<std::uint64_t> seq = frames.size() == 3 ? read_seq(frames[1]) : std::nullopt;
    if (!seq) {
      if (stats.malformed_frames++ < 10) spdlog::warn("bridge: malformed message ({} frames) dropped", frames.size());
      return;
    }
    if (replaying) {
      buffered.emplace_back(*seq, std::move(frames[2]));
      if (buffered.size() >= config.max_buffered_batches) finish_replay(false);
      return;
    }
    accept(*seq, std::move(frames[2]), Source::live);
  }

  void on_replay(std::vector<zmq::message_t>& frames) {
    if (!replaying) return;  // a late answer; the DEALER is recreated on abandon, so rare
    // [empty, seq, payload] or [empty, topic, seq, payload]
    const std::size_t first = !frames.empty() && frames[0].size() == 0 ? 1 : 0;
    const std::size_t n = frames.size() - first;
    if (n != 2 && n != 3) {
      ++stats.malformed_frames;
      return;
    }
    const zmq::message_t& seq_frame = frames[frames.size() - 2];
    const auto seq = read_seq(seq_frame);
    if (!seq) {
      ++stats.malformed_frames;
      return;
    }
    if (*seq == kReplayEndSeq) {
      finish_replay(true);
      return;
    }
    replay_deadline = std::chrono::steady_clock::now() + config.replay_timeout;
    if (*seq >= replay_target) return;  // held in `buffered` already
    accept(*seq, std::move(frames.back()), Source::replay);
  }

  void run() {
    while (!stopping.load(std::memory_order_acquire)) {
      try {
        std::vector<zmq::pollitem_t> items{{sub.handle(), 0, ZMQ_POLLIN, 0}};
        if (dealer) items.push_back({dealer->handle(), 0, ZMQ_POLLIN, 0});
        zmq::poll(items, kPollInterval);
        for (int budget = 0; budget < 1024; ++budget) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(sub, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          on_live(frames);
        }
        while (dealer) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(*dealer, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
          on_replay(frames);
        }
        if (replaying && std::chrono::steady_clock::now() > replay_deadline) finish_replay(false);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        spdlog::error("bridge: zmq error: {}", e.what());
      }
      publish_stats();
    }
    publish_stats();
  }
};

ZmqEventBridge::ZmqEventBridge(ZmqBridgeConfig config, RouterEventSink& sink)
    : impl_(std::make_unique<Impl>(std::move(config), sink)) {}

ZmqEventBridge::~ZmqEventBridge() { stop(); }

SinkStatus ZmqEventBridge::start() {
  if (impl_->thread.joinable()) return SinkStatus("bridge already started");
  if (impl_->config.conversion.block_size == 0) return SinkStatus("block size must be positive");
  try {
    impl_->sub = zmq::socket_t(impl_->context, zmq::socket_type::sub);
    impl_->sub.set(zmq::sockopt::linger, 0);
    impl_->sub.set(zmq::sockopt::rcvhwm, 0);  // NOTE: unbounded: a dropped batch would be a gap
    impl_->sub.set(zmq::sockopt::subscribe, impl_->config.topic);
    impl_->sub.connect(impl_->config.endpoint);
    if (!impl_->config.replay_endpoint.empty()) impl_->connect_dealer();
  } catch (const zmq::error_t& e) {
    return SinkStatus(std::string("zmq: ") + e.what());
  }
  // NOTE: the sockets were made on this thread; thread creation is a full barrier, and from here
  // on only the loop thread touches them.
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  return {};
}

void ZmqEventBridge::stop() {
  impl_->stopping.store(true, std::memory_order_release);
  if (impl_->thread.joinable()) impl_->thread.join();
}

ZmqBridgeStats ZmqEventBridge::stats() const {
  std::lock_guard lock(impl_->shared_mutex);
  return impl_->shared_stats;
}

}  // namespace kvidx::bridge
