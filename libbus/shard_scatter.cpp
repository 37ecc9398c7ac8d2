#include "libbus/shard_scatter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <future>

#include "libcodec/score_merge.h"
#include "libindexer/thread_name.h"

namespace kvidx::bus {
namespace {

using Clock = std::chrono::steady_clock;

std::optional<std::uint64_t> number(std::string_view token) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return value;
}

}  // namespace

ShardScatter::ShardScatter(Connection& conn, Subjects subjects, ScatterOptions options)
    : conn_(conn),
      subjects_(std::move(subjects)),
      options_(options),
      attempt_timeout_(std::max<std::int64_t>(1, options.timeout.count() / (std::max(0, options.retries) + 1))),
      inbox_(conn.new_inbox()) {}

BusResult<std::unique_ptr<ShardScatter>> ShardScatter::start(Connection& conn, Subjects subjects,
                                                             ScatterOptions options) {
  std::unique_ptr<ShardScatter> scatter(new ShardScatter(conn, std::move(subjects), options));
  ShardScatter* self = scatter.get();
  auto sub = conn.subscribe(self->inbox_ + ".>", [self](Message m) { self->on_reply(m); });
  if (!sub.ok()) return sub.error();
  // NOTE: replies of many shards to many queries arrive here at once: never dropped by the client.
  if (auto s = sub.value().set_unlimited_pending(); !s.ok()) return s.error();
  self->sub_ = std::move(sub).value();
  if (auto s = conn.flush(); !s.ok()) return s.error();
  self->timer_ = named_thread("kvidx-scatter", [self] { self->timer_loop(); });
  return scatter;
}

ShardScatter::~ShardScatter() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  sub_ = Subscription();  // NOTE: unsubscribes and waits for a running on_reply before members go
  std::map<std::uint64_t, Pending> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(pending_);
  }
  for (auto& [id, pending] : left) pending.done(ErrorReply{"unavailable", "the front is stopping"});
}

std::uint64_t ShardScatter::retries_sent() const {
  std::lock_guard lock(mutex_);
  return retries_sent_;
}

bool ShardScatter::send(std::uint64_t id, std::uint32_t shard, const std::string& request) {
  auto msg = Message::create(subjects_.shard_query_scores(shard), request, fmt::format("{}.{}.{}", inbox_, id, shard));
  if (!msg.ok()) return false;
  return conn_.publish(msg.value()).ok();
}

void ShardScatter::query(const std::string& request, Done done) {
  std::uint64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    Pending& p = pending_[id];
    p.replies.assign(options_.shards, std::nullopt);
    p.attempts.assign(options_.shards, 1);
    p.attempt_deadline = Clock::now() + attempt_timeout_;
    p.done = std::move(done);
    p.request = request;  // kept for retries
  }
  // NOTE: published outside the lock (a reply racing ahead of the next publish finds its entry);
  // a failed publish (disconnected) is retried by the timer like a lost reply.
  for (std::uint32_t shard = 0; shard < options_.shards; ++shard) send(id, shard, request);
}

ScatterOutcome ShardScatter::query_sync(const std::string& request) {
  auto promise = std::make_shared<std::promise<ScatterOutcome>>();
  auto future = promise->get_future();
  query(request, [promise](ScatterOutcome outcome) { promise->set_value(std::move(outcome)); });
  return future.get();
}

void ShardScatter::on_reply(const Message& msg) {
  // <inbox>.<id>.<shard>
  const std::string_view subject = msg.subject();
  if (subject.size() <= inbox_.size() + 1) return;
  const std::string_view rest = subject.substr(inbox_.size() + 1);
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return;
  const auto id = number(rest.substr(0, dot));
  const auto shard = number(rest.substr(dot + 1));
  if (!id || !shard || *shard >= options_.shards) return;
  if (msg.no_responders()) return;  // no replica of that shard subscribed (now): the timer retries
  Pending done;
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(*id);
    if (it == pending_.end()) return;  // a late answer to a retried or finished query
    auto& slot = it->second.replies[*shard];
    if (slot) return;  // the first answer counts (a retry may bring a second)
    slot = std::string(msg.data());
    if (++it->second.answered < options_.shards) return;
    done = std::move(it->second);
    pending_.erase(it);
  }
  done.done(merge(done));
}

ScatterOutcome ShardScatter::merge(const Pending& pending) {
  std::vector<ScoreReply> parts;
  parts.reserve(pending.replies.size());
  QueryLimits limits;
  limits.max_message_bytes = std::size_t{1} << 30;  // a shard's reply is trusted to be kvidx's
  for (std::size_t shard = 0; shard < pending.replies.size(); ++shard) {
    const std::string& body = *pending.replies[shard];
    if (auto error = decode_error_reply(body)) return *error;
    auto decoded = decode_score_reply(body, limits);
    if (!decoded.ok()) {
      return ErrorReply{"internal",
                        fmt::format("shard {}'s reply is not a score reply: {}", shard, decoded.error().message())};
    }
    parts.push_back(std::move(decoded).value());
  }
  auto merged = merge_score_replies(parts);
  if (!merged.ok()) return ErrorReply{"internal", merged.error()};
  return encode_score_reply(merged.value());
}

void ShardScatter::timer_loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, std::min<std::chrono::milliseconds>(attempt_timeout_, std::chrono::milliseconds(5)));
    if (stop_) break;
    const auto now = Clock::now();
    std::vector<std::pair<std::uint64_t, std::uint32_t>> resend;
    std::vector<Pending> failed;
    for (auto it = pending_.begin(); it != pending_.end();) {
      Pending& p = it->second;
      if (p.attempt_deadline > now) {
        ++it;
        continue;
      }
      std::vector<std::uint32_t> missing;
      for (std::uint32_t shard = 0; shard < options_.shards; ++shard) {
        if (!p.replies[shard]) missing.push_back(shard);
      }
      if (p.attempts[missing.front()] > options_.retries) {
        ErrorReply error{
            "unavailable",
            fmt::format("shard {} of {} did not answer {} within {} ms ({} attempts)", missing.front(), options_.shards,
                        subjects_.shard_query_scores(missing.front()), options_.timeout.count(), options_.retries + 1)};
        p.request = error.message;  // NOTE: the failed query carries its error out of the lock
        failed.push_back(std::move(p));
        it = pending_.erase(it);
        continue;
      }
      for (const std::uint32_t shard : missing) {
        ++p.attempts[shard];
        resend.emplace_back(it->first, shard);
      }
      p.attempt_deadline = now + attempt_timeout_;
      ++it;
    }
    retries_sent_ += resend.size();
    if (options_.retries_counter != nullptr && !resend.empty()) options_.retries_counter->inc(resend.size());
    std::vector<std::pair<std::uint64_t, std::string>> bodies;
    for (const auto& [id, shard] : resend) bodies.emplace_back(id, pending_.at(id).request);
    lock.unlock();
    for (std::size_t i = 0; i < resend.size(); ++i) send(resend[i].first, resend[i].second, bodies[i].second);
    for (Pending& p : failed) p.done(ErrorReply{"unavailable", p.request});
    lock.lock();
  }
}

}  // namespace kvidx::bus
