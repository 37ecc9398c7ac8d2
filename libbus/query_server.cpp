#include "libbus/query_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "libbus/chunked_reply.h"
#include "libbus/event_chunks.h"
#include "libbus/subjects.h"
#include "libcodec/dump_codec.h"
#include "libcodec/router_messages_codec.h"
#include "libcodec/untrusted_text.h"
#include "libindexer/hashing.h"

namespace kvidx::bus {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

QueryServer::QueryServer(ServiceContext& ctx, Ingest& ingest, StatsReply stats_reply)
    : ctx_(ctx), counters_(ctx.counters), ingest_(ingest), stats_reply_(std::move(stats_reply)) {}

void QueryServer::stop() { subs_.clear(); }

std::uint64_t QueryServer::queries_rejected() const {
  std::uint64_t total = 0;
  for (const Counter* c : counters_.queries_rejected) total += c->value();
  return total;
}

std::vector<std::pair<std::string, std::uint64_t>> QueryServer::queries_rejected_by_reason() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (std::size_t k = 0; k < kCodecErrorKinds; ++k) {
    out.emplace_back(std::string(to_string(static_cast<CodecErrorKind>(k))), counters_.queries_rejected[k]->value());
  }
  return out;
}

// Every reply goes through here: one that does not fit the server's max_payload is chunked for a
// requester that accepts chunks, else answered with a reply_too_large error (chunked_reply.h), so
// a requester never waits for a reply that vanished. A publish failure is counted and logged.
void QueryServer::reply(const Message& request, std::string_view body) {
  if (request.reply().empty()) return;
  auto sent = send_reply(ctx_.query_conn, request, body, request.subject());
  if (sent.ok() && sent.value() == ReplyShape::too_large) counters_.reply_too_large_total->inc();
  if (!sent.ok()) {
    counters_.reply_failures_total->inc();
    if (const auto v = ctx_.warnings.admit("reply_failure"); v.log) {
      spdlog::warn("reply on {} failed: {}{}", request.subject(), sent.error().message, suppressed_note(v));
    }
  } else if (sent.value() == ReplyShape::too_large) {
    if (const auto v = ctx_.warnings.admit("reply_too_large"); v.log) {
      spdlog::warn("a reply on {} of {} bytes exceeds the server's max_payload; answered reply_too_large{}",
                   request.subject(), body.size(), suppressed_note(v));
    }
  }
}

void QueryServer::on_scores(Message msg) {
  const auto t0 = Clock::now();
  auto request = decode_score_request(msg.data(), ctx_.config.query_limits);
  if (!request.ok()) {
    const CodecError& error = request.error();
    counters_.queries_rejected[static_cast<std::size_t>(error.kind)]->inc();
    if (const auto v = ctx_.warnings.admit(fmt::format("query_rejected:{}", to_string(error.kind))); v.log) {
      spdlog::warn("score query of {} bytes rejected ({}): {}{}", msg.data().size(), to_string(error.kind),
                   error.message(), suppressed_note(v));
    }
    reply(msg, encode_error_reply({"bad_request", error.message()}));
  } else {
    const ScoreRequest& r = request.value();
    // Device scores as `scores`, lower tiers and the combined score beside them (query_codec.h).
    StreamLoads loads = ctx_.load.snapshot();
    if (const auto& shard = ctx_.config.shard; shard) {
      // NOTE: every shard tracks every request lifecycle (they are keyed by request id, not
      // worker); each answers only its own workers' load, so the merged reply counts each once.
      std::erase_if(loads, [&](const auto& entry) {
        return shard_of_worker(entry.first.worker_id, shard->count) != shard->index;
      });
    }
    reply(msg, encode_score_reply(make_score_reply(ctx_.indexer.find_tiered_matches(r.local_hashes, r.early_exit),
                                                   ctx_.config.tier_weights, loads)));
  }
  counters_.query_latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
}

void QueryServer::on_admin(Message msg) {
  const auto t0 = Clock::now();
  const std::string_view subject = msg.subject();
  try {
    if (subject == ctx_.subjects.admin_stats()) {
      reply(msg, stats_reply_(msg.data()));
    } else if (subject == ctx_.subjects.admin_workers()) {
      WorkersReply workers{ctx_.indexer.get_workers(), {}};
      for (const auto& [stream, blocks] : ctx_.indexer.tree().stream_block_counts())
        workers.streams.push_back({stream, blocks});
      reply(msg, encode_workers_reply(workers));
    } else if (subject == ctx_.subjects.admin_remove_worker()) {
      // NOTE: handled by on_remove_worker, on every replica (see start()); the queue group
      // member that also receives it stays silent.
      return;
    } else if (subject == ctx_.subjects.admin_replicas()) {
      return;  // NOTE: like remove_worker, answered by on_replicas on every replica
    } else if (subject == ctx_.subjects.admin_dump()) {
      send_dump(msg);
    } else {
      reply(msg, encode_error_reply({"bad_request", "unknown admin subject " + std::string(subject)}));
    }
  } catch (const std::exception& e) {
    reply(msg, encode_error_reply({"internal", e.what()}));
  }
  counters_.admin_latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
}

// kv.admin.remove_worker {"worker_id":W,"dp_rank"?:R}: every replica receives it (a plain
// subscription, not the queue group) and removes the worker/rank from its own index, then
// replies; the requester reads the first reply (request/reply takes one), {"ok":true} or an
// error. Replicas that are not running at that moment do not see it (see service.h).
void QueryServer::on_remove_worker(Message msg) {
  const auto t0 = Clock::now();
  try {
    auto request = decode_remove_worker_request(msg.data());
    if (!request.ok()) {
      reply(msg, encode_error_reply({"bad_request", request.error().message()}));
    } else {
      const IndexerStatus status = ingest_.remove_worker(request.value());
      if (status != IndexerStatus::ok)
        reply(msg, encode_error_reply({"unavailable", "indexer offline"}));
      else
        reply(msg, encode_ok_reply());
    }
  } catch (const std::exception& e) {
    reply(msg, encode_error_reply({"internal", e.what()}));
  }
  counters_.admin_latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
}

// kv.admin.replicas: kv.admin.stats answered by every replica (a plain subscription), so a
// requester collecting replies on its inbox for a short window sees each running replica once
// (`kvidx stats --all`), without knowing their names or number beforehand.
void QueryServer::on_replicas(Message msg) {
  const auto t0 = Clock::now();
  try {
    reply(msg, stats_reply_(msg.data()));
  } catch (const std::exception& e) {
    reply(msg, encode_error_reply({"internal", e.what()}));
  }
  counters_.admin_latency->observe(std::chrono::duration<double>(Clock::now() - t0).count());
}

// kv.admin.dump protocol: the requester sends a request with a reply inbox and keeps reading that
// inbox. kvidx answers with N >= 0 chunk messages (header Kvidx-Dump: chunk; body: JSONL, one
// Stored RouterEvent per line, each message under the server's max payload as read now; a long
// edge is split over several chained events by EventChunker, the one step snapshots use too),
// then one end marker (header Kvidx-Dump: end; body {"end":true,"events":E,"chunks":N}, E and
// N counting what was sent). A failure, before or midway, ends the dump with one end marker
// {"error":{...}}: a dump is never silently short.
void QueryServer::send_dump(const Message& request) {
  if (request.reply().empty()) return;
  const std::string inbox(request.reply());
  const std::int64_t max_payload = ctx_.query_conn.max_payload();
  auto send = [&](std::string_view body, const char* kind) -> BusStatus {
    // NOTE: as in send_reply: nothing goes to nats.c's reconnect buffer (see chunked_reply.cpp).
    if (!ctx_.query_conn.connected() || ctx_.query_conn.max_payload() != max_payload) {
      return BusError{NATS_CONNECTION_DISCONNECTED, "NATS reconnected during the dump"};
    }
    auto m = Message::create(inbox, body);
    if (!m.ok()) return m.error();
    if (auto s = m.value().set_header(kDumpHeader, kind); !s.ok()) return s;
    return ctx_.query_conn.publish(m.value());
  };
  auto fail = [&](const std::string& code, const std::string& message) {
    spdlog::warn("dump failed: {}", message);
    if (auto s = send(encode_error_reply({code, message}), kDumpEnd); !s.ok()) {
      counters_.reply_failures_total->inc();
      spdlog::warn("dump error marker could not be sent: {}", s.error().message);
    }
  };
  auto events = ctx_.indexer.dump_events();
  if (!events) {
    fail("unavailable", "indexer offline");
    return;
  }
  std::size_t sent = 0;
  EventChunker chunker(chunk_body_limit(max_payload), [&](std::string_view body) -> BusStatus {
    if (auto s = send(body, kDumpChunk); !s.ok()) return s;
    // NOTE: pace large dumps so the requester's pending limits are not overrun.
    if (++sent % 64 == 0) ctx_.query_conn.flush(2000);
    return {};
  });
  for (const RouterEvent& e : *events) {
    if (auto s = chunker.add(e); !s.ok()) {
      fail("internal", "dump failed after " + std::to_string(chunker.chunks()) + " chunk(s): " + s.error().message);
      return;
    }
  }
  if (auto s = chunker.finish(); !s.ok()) {
    fail("internal", "dump failed after " + std::to_string(chunker.chunks()) + " chunk(s): " + s.error().message);
    return;
  }
  if (auto s = send(encode_dump_end({chunker.lines(), chunker.chunks()}), kDumpEnd); !s.ok()) {
    counters_.reply_failures_total->inc();
    spdlog::warn("dump end marker could not be sent: {}", s.error().message);
  }
}

// <prefix>.routing.decisions (approximate mode): the router's choice for one request
// (libcodec/router_messages_codec.h). A reply, when asked for, is {"ok":true} or an error reply.
void QueryServer::on_routing_decision(Message msg) {
  std::string problem;
  auto decision = decode_routing_decision(msg.data(), ctx_.config.query_limits);
  if (!decision.ok()) {
    problem = decision.error().message();
  } else {
    RoutingDecision& d = decision.value();
    if (const auto& shard = ctx_.config.shard;
        shard && shard_of_worker(d.stream.worker_id, shard->count) != shard->index) {
      // NOTE: a plain subscription: every shard receives the decision; the worker's shard indexes it.
      reply(msg, encode_ok_reply());
      return;
    }
    if (!d.sequence_hashes) d.sequence_hashes = compute_sequence_hashes(d.local_hashes);
    switch (ctx_.indexer.process_routing_decision(d.stream, d.local_hashes, *d.sequence_hashes)) {
      case RoutingDecisionStatus::recorded: break;
      case RoutingDecisionStatus::length_mismatch: problem = "local_hashes and sequence_hashes differ in length"; break;
      case RoutingDecisionStatus::not_approximate: problem = "approximate mode is off"; break;
      case RoutingDecisionStatus::offline: problem = "indexer offline"; break;
    }
  }
  if (!problem.empty()) {
    if (const auto v = ctx_.warnings.admit("routing_decision_rejected"); v.log) {
      spdlog::warn("routing decision rejected: {}{}", problem, suppressed_note(v));
    }
    reply(msg, encode_error_reply({"bad_request", problem}));
    return;
  }
  reply(msg, encode_ok_reply());
}

// <prefix>.requests.<worker_id> lifecycle messages (ActiveLoad; libcodec/router_messages_codec.h).
void QueryServer::on_request_lifecycle(Message msg) {
  const auto worker = ctx_.subjects.worker_from_requests_subject(msg.subject());
  LoadStatus status = LoadStatus::ok;
  std::string problem;
  auto message = decode_request_lifecycle(msg.data(), ctx_.config.query_limits);
  if (!message.ok()) {
    problem = message.error().message();
  } else {
    const RequestLifecycle& m = message.value();
    switch (m.op) {
      case LifecycleOp::admit:
        if (!worker)
          problem = "no worker id in subject";
        else
          status = ctx_.load.admit({*worker, m.dp_rank}, m.request_id, m.block_hashes).status;
        break;
      case LifecycleOp::output: status = ctx_.load.append_output(m.request_id, m.block_hash); break;
      case LifecycleOp::fraction: status = ctx_.load.set_fraction(m.request_id, m.fraction); break;
      case LifecycleOp::finish: status = ctx_.load.finish(m.request_id).status; break;
    }
  }
  if (problem.empty() && status != LoadStatus::ok) problem = std::string(to_string(status));
  if (problem.empty()) {
    counters_.lifecycle_total->inc();
    reply(msg, encode_ok_reply());
  } else {
    counters_.lifecycle_rejected->inc();
    if (const auto v = ctx_.warnings.admit("lifecycle_rejected"); v.log) {
      spdlog::warn("request lifecycle message on {} rejected: {}{}", untrusted_excerpt(msg.subject()), problem,
                   suppressed_note(v));
    }
    reply(msg, encode_error_reply({"bad_request", problem}));
  }
}

BusStatus QueryServer::start() {
  auto add = [&](const std::string& subject, void (QueryServer::*handler)(Message)) -> BusStatus {
    auto sub = ctx_.query_conn.queue_subscribe(subject, kQueueGroup,
                                               [this, handler](Message m) { (this->*handler)(std::move(m)); });
    if (!sub.ok()) return sub.error();
    subs_.push_back(std::move(sub).value());
    return {};
  };
  if (auto s = add(ctx_.subjects.query_scores(), &QueryServer::on_scores); !s.ok()) return s;
  if (auto s = add(ctx_.subjects.admin_wildcard(), &QueryServer::on_admin); !s.ok()) return s;
  // NOTE: worker removal changes every replica's index, so it is a plain subscription too: a
  // queue group would let exactly one replica remove the worker and the others keep serving its
  // blocks. (A removal record in the events stream would also reach replicas that are down now;
  // see service.h.)
  auto removal = ctx_.query_conn.subscribe(ctx_.subjects.admin_remove_worker(),
                                           [this](Message m) { on_remove_worker(std::move(m)); });
  if (!removal.ok()) return removal.error();
  subs_.push_back(std::move(removal).value());
  auto replicas =
      ctx_.query_conn.subscribe(ctx_.subjects.admin_replicas(), [this](Message m) { on_replicas(std::move(m)); });
  if (!replicas.ok()) return replicas.error();
  subs_.push_back(std::move(replicas).value());
  // NOTE: lifecycle messages update shared load state; every replica must see them, so they are
  // a plain subscription, not the queue group.
  if (ctx_.config.approximate) {
    // NOTE: like events, decisions change every replica's index: a plain subscription.
    auto decisions = ctx_.query_conn.subscribe(ctx_.subjects.routing_decisions(),
                                               [this](Message m) { on_routing_decision(std::move(m)); });
    if (!decisions.ok()) return decisions.error();
    subs_.push_back(std::move(decisions).value());
  }
  auto lifecycle = ctx_.query_conn.subscribe(ctx_.subjects.requests_wildcard(),
                                             [this](Message m) { on_request_lifecycle(std::move(m)); });
  if (!lifecycle.ok()) return lifecycle.error();
  subs_.push_back(std::move(lifecycle).value());
  return ctx_.query_conn.flush();
}

}  // namespace kvidx::bus
