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

#include "libindexer/thread_name.h"

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
  // A batch handed to accept(): live, from the replay socket, or held during a replay.
  // NOTE: a member type, not in the file's anonymous namespace: a field of this externally
  // linked class may not have an internal type when the file is compiled in a unity batch.
  struct Held {
    std::uint64_t seq = 0;
    zmq::message_t payload;
    bool replayed = false;       // came from the replay socket (counted as replayed when delivered)
    bool gap_requested = false;  // the gap before it was counted and its replay asked for already
  };

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
  bool draining_after_failure = false;  // no new replay while the held batches of a failed one drain
  std::uint64_t replay_from = 0;
  std::uint64_t replay_target = 0;  // first held seq (buffered.front() while replaying)
  std::size_t hold_cursor = 0;      // where hold_replayed() resumes in `buffered`
  std::chrono::steady_clock::time_point replay_deadline;
  std::deque<Held> buffered;
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
      if (stats.sink_failures++ < 10)
        spdlog::warn("bridge: delivery of {} events failed: {}", out.size(), status.error());
    } else {
      stats.router_events += out.size();
    }
    out.clear();
  }

  // Batches lost for good: ids skipped so kvidx sees the gap; optional re-sync by `cleared`.
  void lose(std::uint64_t count, std::uint64_t before_seq, const char* why) {
    spdlog::warn("bridge: {} batches before seq {} lost ({}){}", count, before_seq, why,
                 config.clear_on_gap ? "; clearing" : "");
    stats.unrecovered_batches += count;
    converter.skip_event_ids(count, config.conversion.default_dp_rank);
    if (config.clear_on_gap) {
      for (DpRank rank : converter.known_ranks()) out.push_back(converter.make_cleared(rank));
      hand_to_sink();
    }
  }

  void deliver(const Held& item) {
    last = item.seq;
    auto batch = decode_vllm_event_batch(bytes_of(item.payload), config.limits);
    if (!batch) {
      if (stats.malformed_frames++ < 10) {
        spdlog::warn("bridge: undecodable batch seq {}: {}", item.seq, batch.error().message());
      }
      converter.skip_event_ids(1, config.conversion.default_dp_rank);
      return;
    }
    converter.convert(batch.value(), out);
    hand_to_sink();
    ++stats.batches_delivered;
    if (item.replayed) ++stats.replayed_batches;
  }

  // Asks for the batches from `from` on and holds `trigger` (the batch after the gap) in front of
  // the batches held already, which all come after it.
  void start_replay(std::uint64_t from, Held trigger, const char* found) {
    ++stats.replays_requested;
    replaying = true;
    replay_from = from;
    replay_target = trigger.seq;
    hold_cursor = 0;
    replay_deadline = std::chrono::steady_clock::now() + config.replay_timeout;
    trigger.gap_requested = true;
    buffered.push_front(std::move(trigger));
    unsigned char request[8];
    for (int i = 0; i < 8; ++i) request[i] = static_cast<unsigned char>(from >> (56 - 8 * i));
    // NOTE: the empty first frame is the delimiter a REQ socket would add; vLLM's ROUTER expects
    // [identity, empty, start] and answers with the same envelope.
    const bool sent = dealer->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
                      dealer->send(zmq::buffer(request, sizeof(request)), zmq::send_flags::dontwait);
    spdlog::info("bridge: {} seq {}{}: replay requested from seq {}", last ? "gap before" : "late start at",
                 replay_target, found, from);
    if (!sent) finish_replay(false);
  }

  void finish_replay(bool completed) {
    replaying = false;
    const bool was_failure = draining_after_failure;
    if (!completed) {
      ++stats.replay_failures;
      spdlog::warn("bridge: replay from seq {} did not complete; delivering the {} held batches", replay_from,
                   buffered.size());
      connect_dealer();  // drop any late answer to the abandoned request
      draining_after_failure = true;
    } else {
      spdlog::info("bridge: replay from seq {} answered; delivering the {} held batches", replay_from, buffered.size());
    }
    // NOTE: a gap among the held batches starts the next replay (the rest stay held behind it),
    // which ends this drain; the next answer drains on.
    while (!replaying && !buffered.empty()) {
      Held item = std::move(buffered.front());
      buffered.pop_front();
      accept(std::move(item), Source::drained);
    }
    draining_after_failure = was_failure;
  }

  void accept(Held item, Source source) {
    const std::uint64_t seq = item.seq;
    if (!last) {
      if (source == Source::live && dealer && config.catch_up_on_start && seq > 0) {
        start_replay(0, std::move(item), "");
        return;
      }
      deliver(item);
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
      accept(std::move(item), source);
      return;
    }
    if (seq == *last + 1) {
      deliver(item);
      return;
    }
    const std::uint64_t missing = seq - *last - 1;
    // Invariant: each gap is counted once, when first found (live, or among the batches held during
    // a replay), and each missing batch ends up either replayed or lost, once.
    if (source == Source::replay) {
      lose(missing, seq, "gone from the engine's replay buffer");
    } else if (item.gap_requested) {
      lose(missing, seq, draining_after_failure ? "replay failed" : "gone from the engine's replay buffer");
    } else {
      ++stats.gaps;
      stats.missing_batches += missing;
      if (dealer && !draining_after_failure) {
        start_replay(*last + 1, std::move(item), source == Source::live ? "" : " (found during a replay)");
        return;
      }
      lose(missing, seq, dealer ? "replay failed" : "no replay endpoint");
    }
    deliver(item);
  }

  void on_live(std::vector<zmq::message_t>& frames) {
    ++stats.frames;
    std::optional<std::uint64_t> seq = frames.size() == 3 ? read_seq(frames[1]) : std::nullopt;
    if (!seq) {
      if (stats.malformed_frames++ < 10) spdlog::warn("bridge: malformed message ({} frames) dropped", frames.size());
      return;
    }
    if (replaying) {
      buffered.push_back(Held{*seq, std::move(frames[2])});
      if (buffered.size() >= config.max_buffered_batches) finish_replay(false);
      return;
    }
    accept(Held{*seq, std::move(frames[2])}, Source::live);
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
    if (*seq >= replay_target) {
      hold_replayed(*seq, frames.back());
      return;
    }
    accept(Held{*seq, std::move(frames.back()), true}, Source::replay);
  }

  // A replayed batch at or past the target: the engine still had it when it answered. It fills a
  // hole among the held live batches (one lost while this replay ran), so no second replay is
  // needed for it; a batch held already, or past the last held one (the live socket brings it, or
  // the drain finds its gap), is ignored.
  void hold_replayed(std::uint64_t seq, zmq::message_t& payload) {
    if (buffered.size() >= config.max_buffered_batches) return;  // the drain's replay fetches it
    // NOTE: the answer ascends, so the scan resumes where the last one stopped (hold_cursor):
    // linear in held + replayed batches, not their product.
    for (; hold_cursor < buffered.size(); ++hold_cursor) {
      const auto it = buffered.begin() + static_cast<std::ptrdiff_t>(hold_cursor);
      // NOTE: held seqs ascend from replay_target (front) until an engine restart, after which
      // they are another run's: stop there.
      if (it != buffered.begin() && it->seq <= std::prev(it)->seq) return;
      if (it->seq == seq) return;
      if (it->seq > seq) {
        // NOTE: `it` is not the front (front().seq == replay_target <= seq). The hole is a gap the
        // drain will not see: count it here, once (a run of replayed batches is one gap).
        const Held& before = *std::prev(it);
        if (!(before.replayed && before.seq + 1 == seq)) {
          ++stats.gaps;
          spdlog::info("bridge: gap before seq {} (found during a replay): filled from the replay's answer", it->seq);
        }
        ++stats.missing_batches;
        buffered.insert(it, Held{seq, std::move(payload), true});
        ++hold_cursor;  // past the inserted batch, at `it` again
        return;
      }
    }
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
  impl_->thread = named_thread("kvidx-zmq", [impl = impl_.get()] { impl->run(); });
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
