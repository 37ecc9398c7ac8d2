// Test double of a vLLM engine's KV-event publisher: a real ZMQ publisher (XPUB, so a test can
// wait until the bridge's subscription has arrived instead of sleeping) and a ROUTER replay
// socket served on its own thread, both on 127.0.0.1 ephemeral ports, plus msgpack builders for
// KVEventBatch payloads in vLLM's encodings. Header-only (the test folder globs *_test.cpp).
#pragma once

#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace kvidx::testing {

// ---- msgpack payload builders -------------------------------------------------------------

enum class HashEncoding : std::uint8_t { uint, signed_wrap, bytes32 };
enum class EventEncoding : std::uint8_t { array, map };

// Token ids from, from + 1, ..., count of them.
inline std::vector<std::uint32_t> tokens(std::uint32_t from, std::uint32_t count) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < count; ++i) out.push_back(from + i);
  return out;
}

inline std::vector<std::uint32_t> concat(std::vector<std::uint32_t> a, const std::vector<std::uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct EngineStored {
  std::vector<std::uint64_t> hashes;
  std::optional<std::uint64_t> parent;
  std::vector<std::uint32_t> tokens;
  std::uint32_t block_size = 4;
  std::optional<std::int64_t> lora_id;
  std::optional<std::string> medium = std::string("GPU");
  std::optional<std::string> lora_name;
  // Packed as Eagle bigrams [[t0,t1],[t1,t2],...] (tokens must then hold n + 1 ids for n pairs).
  bool bigrams = false;
  // vLLM's extra_keys, one entry per block: nullopt = nil, else string keys (mm digests, LoRA
  // names, salts). Packed only when set (omit_defaults), as the 8th field.
  std::optional<std::vector<std::optional<std::vector<std::string>>>> extra_keys;
};
struct EngineRemoved {
  std::vector<std::uint64_t> hashes;
  std::optional<std::string> medium = std::string("GPU");
};
struct EngineCleared {};
using EngineEvent = std::variant<EngineStored, EngineRemoved, EngineCleared>;

struct BatchEncoding {
  HashEncoding hashes = HashEncoding::uint;
  EventEncoding events = EventEncoding::array;
  bool with_rank = true;
};

class BatchPacker {
 public:
  explicit BatchPacker(BatchEncoding encoding) : encoding_(encoding), pk_(&buffer_) {}

  std::string pack(double ts, const std::vector<EngineEvent>& events, std::uint32_t rank) {
    pk_.pack_array(encoding_.with_rank ? 3 : 2);
    pk_.pack_double(ts);
    pk_.pack_array(static_cast<std::uint32_t>(events.size()));
    for (const EngineEvent& e : events) pack_event(e);
    if (encoding_.with_rank) pk_.pack_uint32(rank);
    return std::string(buffer_.data(), buffer_.size());
  }

 private:
  void str(std::string_view s) {
    pk_.pack_str(static_cast<std::uint32_t>(s.size()));
    pk_.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
  }
  void opt_str(const std::optional<std::string>& s) {
    if (s)
      str(*s);
    else
      pk_.pack_nil();
  }
  void hash(std::uint64_t h) {
    switch (encoding_.hashes) {
      case HashEncoding::uint: pk_.pack_uint64(h); break;
      case HashEncoding::signed_wrap:
        if (h >= (1ULL << 63))
          pk_.pack_int64(static_cast<std::int64_t>(h));
        else
          pk_.pack_uint64(h);
        break;
      case HashEncoding::bytes32: {
        // sha256-sized: 24 filler bytes, then the hash big-endian in the last 8.
        char bytes[32] = {};
        for (int i = 0; i < 24; ++i) bytes[i] = static_cast<char>(0xA0 + i);
        for (int i = 0; i < 8; ++i) bytes[24 + i] = static_cast<char>((h >> (56 - 8 * i)) & 0xFF);
        pk_.pack_bin(32);
        pk_.pack_bin_body(bytes, 32);
        break;
      }
    }
  }
  void hashes(const std::vector<std::uint64_t>& hs) {
    pk_.pack_array(static_cast<std::uint32_t>(hs.size()));
    for (std::uint64_t h : hs) hash(h);
  }
  void key(std::string_view k) { str(k); }
  void pack_event(const EngineEvent& e) {
    const bool map = encoding_.events == EventEncoding::map;
    if (const auto* s = std::get_if<EngineStored>(&e)) {
      const std::uint32_t fields = s->extra_keys ? 9 : 8;
      if (map) {
        pk_.pack_map(fields);
        key("type");
      } else {
        pk_.pack_array(fields);
      }
      str("BlockStored");
      if (map) key("block_hashes");
      hashes(s->hashes);
      if (map) key("parent_block_hash");
      if (s->parent)
        hash(*s->parent);
      else
        pk_.pack_nil();
      if (map) key("token_ids");
      if (s->bigrams) {
        const std::size_t pairs = s->tokens.empty() ? 0 : s->tokens.size() - 1;
        pk_.pack_array(static_cast<std::uint32_t>(pairs));
        for (std::size_t i = 0; i < pairs; ++i) {
          pk_.pack_array(2);
          pk_.pack_uint32(s->tokens[i]);
          pk_.pack_uint32(s->tokens[i + 1]);
        }
      } else {
        pk_.pack_array(static_cast<std::uint32_t>(s->tokens.size()));
        for (std::uint32_t t : s->tokens) pk_.pack_uint32(t);
      }
      if (map) key("block_size");
      pk_.pack_uint32(s->block_size);
      if (map) key("lora_id");
      if (s->lora_id)
        pk_.pack_int64(*s->lora_id);
      else
        pk_.pack_nil();
      if (map) key("medium");
      opt_str(s->medium);
      if (map) key("lora_name");
      opt_str(s->lora_name);
      if (s->extra_keys) {
        if (map) key("extra_keys");
        pk_.pack_array(static_cast<std::uint32_t>(s->extra_keys->size()));
        for (const auto& block : *s->extra_keys) {
          if (!block) {
            pk_.pack_nil();
            continue;
          }
          pk_.pack_array(static_cast<std::uint32_t>(block->size()));
          for (const std::string& k : *block) str(k);
        }
      }
    } else if (const auto* r = std::get_if<EngineRemoved>(&e)) {
      if (map) {
        pk_.pack_map(3);
        key("type");
      } else {
        pk_.pack_array(3);
      }
      str("BlockRemoved");
      if (map) key("block_hashes");
      hashes(r->hashes);
      if (map) key("medium");
      opt_str(r->medium);
    } else {
      if (map) {
        pk_.pack_map(1);
        key("type");
      } else {
        pk_.pack_array(1);
      }
      str("AllBlocksCleared");
    }
  }

  BatchEncoding encoding_;
  msgpack::sbuffer buffer_;
  msgpack::packer<msgpack::sbuffer> pk_;
};

inline std::string pack_batch(const std::vector<EngineEvent>& events, std::uint32_t rank = 0, BatchEncoding enc = {}) {
  return BatchPacker(enc).pack(1.5, events, rank);
}

// ---- the publisher ------------------------------------------------------------------------

enum class ReplayReplyShape : std::uint8_t { with_topic, without_topic };
// Which batches a held replay answers with: those buffered when the request arrived, or those
// buffered when it is answered (vLLM reads its buffer when it serves the request).
enum class ReplaySnapshot : std::uint8_t { at_request, at_answer };

class FakeVllmEngine {
 public:
  explicit FakeVllmEngine(bool with_replay, std::string topic = "kv-events",
                          ReplayReplyShape shape = ReplayReplyShape::with_topic)
      : topic_(std::move(topic)), shape_(shape), pub_(context_, zmq::socket_type::xpub) {
    pub_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    if (with_replay) {
      router_.emplace(context_, zmq::socket_type::router);
      router_->set(zmq::sockopt::linger, 0);
      router_->bind("tcp://127.0.0.1:*");
      replay_thread_ = std::thread([this] { serve_replay(); });
    }
  }
  ~FakeVllmEngine() {
    stop_ = true;
    if (replay_thread_.joinable()) replay_thread_.join();
  }

  std::string endpoint() const { return pub_.get(zmq::sockopt::last_endpoint); }
  std::string replay_endpoint() const { return router_ ? router_->get(zmq::sockopt::last_endpoint) : std::string(); }
  // Counts a request once its snapshot (ReplaySnapshot::at_request) is taken.
  std::uint64_t replay_requests() const { return replay_requests_.load(); }

  // A slow engine: replay requests are read (and counted) but answered only after
  // release_replays(), so a test can publish (and drop) batches while a replay is under way.
  void hold_replays(ReplaySnapshot snapshot) {
    snapshot_at_request_ = snapshot == ReplaySnapshot::at_request;
    hold_ = true;
  }
  void release_replays() { hold_ = false; }

  // Blocks until a subscriber's subscription reached the XPUB (the bridge is connected).
  void wait_for_subscriber(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::vector<zmq::pollitem_t> items{{pub_.handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(items, timeout) == 0) throw std::runtime_error("no subscriber within the timeout");
    zmq::message_t sub;
    (void)pub_.recv(sub);
  }

  // Publishes the batch as seq `seq` (kept for replay); with `deliver` false it is only kept,
  // as if the subscriber had missed it.
  void publish(std::uint64_t seq, std::string payload, bool deliver = true) {
    {
      std::lock_guard lock(mutex_);
      history_.emplace_back(seq, payload);
    }
    if (deliver) send_raw({topic_, seq_bytes(seq), std::move(payload)});
  }
  void send_raw(const std::vector<std::string>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      pub_.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  // Forgets batches below `seq` (the engine's bounded replay buffer evicted them).
  void evict_history_before(std::uint64_t seq) {
    std::lock_guard lock(mutex_);
    std::erase_if(history_, [seq](const auto& h) { return h.first < seq; });
  }

  static std::string seq_bytes(std::uint64_t seq) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((seq >> (56 - 8 * i)) & 0xFF);
    return out;
  }

 private:
  void serve_replay() {
    while (!stop_) {
      std::vector<zmq::pollitem_t> items{{router_->handle(), 0, ZMQ_POLLIN, 0}};
      if (zmq::poll(items, std::chrono::milliseconds(20)) == 0) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(*router_, std::back_inserter(request))) continue;
      if (request.size() != 3 || request[2].size() != 8) continue;
      std::uint64_t start = 0;
      for (std::size_t i = 0; i < 8; ++i)
        start = (start << 8) | static_cast<const unsigned char*>(request[2].data())[i];
      const std::string identity = request[0].to_string();
      const auto take_snapshot = [this] {
        std::lock_guard lock(mutex_);
        return history_;
      };
      const bool held = hold_;
      std::vector<std::pair<std::uint64_t, std::string>> snapshot;
      if (!held || snapshot_at_request_) snapshot = take_snapshot();
      ++replay_requests_;
      if (held) {
        while (hold_ && !stop_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        if (!snapshot_at_request_) snapshot = take_snapshot();
      }
      for (const auto& [seq, payload] : snapshot) {
        if (seq >= start) reply(identity, seq_bytes(seq), payload);
      }
      reply(identity, std::string(8, '\xFF'), std::string());
    }
  }
  void reply(const std::string& identity, const std::string& seq, const std::string& payload) {
    std::vector<std::string> frames{identity, std::string()};
    if (shape_ == ReplayReplyShape::with_topic) frames.push_back(topic_);
    frames.push_back(seq);
    frames.push_back(payload);
    for (std::size_t i = 0; i < frames.size(); ++i) {
      router_->send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  std::string topic_;
  ReplayReplyShape shape_;
  zmq::context_t context_{1};
  zmq::socket_t pub_;
  std::optional<zmq::socket_t> router_;
  std::thread replay_thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> replay_requests_{0};
  std::atomic<bool> hold_{false};
  std::atomic<bool> snapshot_at_request_{true};
  std::mutex mutex_;
  std::vector<std::pair<std::uint64_t, std::string>> history_;  // guarded by mutex_
};

}  // namespace kvidx::testing
