#include "libbus/snapshotter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "libindexer/thread_name.h"

namespace kvidx::bus {

Snapshotter::Snapshotter(ServiceContext& ctx, Ingest& ingest) : ctx_(ctx), ingest_(ingest) {}

BusStatus Snapshotter::open() {
  // NOTE: the chunk size follows the server's max_payload as it is at each write (a reconnect to
  // a server with another max_payload changes it), so it is read there, not here.
  store_.emplace(*ctx_.js, ctx_.ingest_conn, ctx_.subjects, ctx_.config.snapshot_stream, ctx_.config.durable);
  if (auto s = store_->ensure_stream(ctx_.config.stream_replicas, ctx_.known_servers); !s.ok()) return s;
  if (ctx_.config.restore_snapshot) {
    if (auto s = restore(); !s.ok()) return s;
  }
  last_good_.store(Clock::now().time_since_epoch().count());
  ctx_.metrics.gauge_callback("kvidx_snapshot_age_seconds",
                              "Seconds since the newest good snapshot (this process's last written, or its start)", {},
                              [this] { return age_seconds(); });
  ctx_.metrics.gauge_callback("kvidx_snapshot_stale", "1 while the newest good snapshot is older than the stale bound",
                              {}, [this] { return stale() ? 1.0 : 0.0; });
  return {};
}

// This service's newest snapshot; without one, the newest of any replica on the same snapshot
// stream and prefix (they all index the same events stream, so any replica's cut at sequence S is
// this one's at S): a replica started late bootstraps from it plus the stream after S.
BusStatus Snapshotter::restore() {
  // NOTE: on a cluster the snapshot stream's leader can change while this replica starts (a node
  // restarting, a new election): an API call that timed out is retried a few times, not fatal.
  auto loaded = store_->load_latest();
  for (int attempt = 1;
       !loaded.ok() && attempt < 5 && (loaded.error().timed_out() || loaded.error().status == NATS_NO_RESPONDERS);
       ++attempt) {
    spdlog::warn("reading the newest snapshot failed ({}); retrying", loaded.error().message);
    loaded = store_->load_latest();
  }
  if (!loaded.ok()) return loaded.error();
  const std::string own_shard = ctx_.config.shard ? to_string(*ctx_.config.shard) : std::string();
  auto describe = [](const std::string& shard) { return shard.empty() ? std::string("unsharded") : "shard " + shard; };
  if (loaded.value() && loaded.value()->shard != own_shard) {
    // NOTE: a shard's snapshot holds only its own workers: restoring it elsewhere would serve a
    // partial (or doubled) index as whole. Refused, never skipped.
    return BusError{NATS_ERR, fmt::format("the snapshot of durable '{}' was written by {}, and this instance is {}: "
                                          "refusing to restore it (use another --durable for this instance)",
                                          ctx_.config.durable, describe(loaded.value()->shard), describe(own_shard))};
  }
  if (!loaded.value()) {
    auto foreign = store_->foreign_snapshot_of_name();
    for (int attempt = 1;
         !foreign.ok() && attempt < 5 && (foreign.error().timed_out() || foreign.error().status == NATS_NO_RESPONDERS);
         ++attempt) {
      spdlog::warn("looking for snapshots of durable '{}' in other layouts failed ({}); retrying", ctx_.config.durable,
                   foreign.error().message);
      foreign = store_->foreign_snapshot_of_name();
    }
    if (!foreign.ok()) return foreign.error();
    if (foreign.value()) {
      return BusError{NATS_ERR,
                      fmt::format("durable '{}' has a snapshot written by {} ({} on {}), and this instance is {}: "
                                  "refusing to start on it (a durable belongs to one shard; use another --durable, "
                                  "or run this one with its own --shard)",
                                  ctx_.config.durable, describe(foreign.value()->second), foreign.value()->first,
                                  ctx_.config.snapshot_stream, describe(own_shard))};
    }
    // NOTE: the other replica purges its older chunks after each commit; a read overtaken by that
    // fails and is retried on the then newest commit.
    for (int attempt = 1;; ++attempt) {
      loaded = store_->load_latest_of_any();
      if (loaded.ok() || attempt >= 5) break;
      spdlog::warn("reading another replica's snapshot failed ({}); retrying", loaded.error().message);
    }
    if (!loaded.ok()) return loaded.error();
    if (!loaded.value()) return {};
    if (loaded.value()->shard != own_shard) {
      // NOTE: cannot happen through the subjects (a shard's bootstrap wildcard sees only its own
      // shard's layout), only through a hand-written commit: refused like the own snapshot above.
      return BusError{NATS_ERR,
                      fmt::format("replica '{}''s snapshot was written by {}, and this instance is {}: "
                                  "refusing to bootstrap from it",
                                  loaded.value()->name, describe(loaded.value()->shard), describe(own_shard))};
    }
    if (loaded.value()->events_stream != ctx_.config.stream) {
      spdlog::info(
          "no snapshot of durable '{}': the newest snapshot on {} ('{}') is of events stream '{}', not '{}': "
          "reading the whole stream",
          ctx_.config.durable, ctx_.config.snapshot_stream, loaded.value()->name, loaded.value()->events_stream,
          ctx_.config.stream);
      return {};
    }
    spdlog::info("no snapshot of durable '{}' yet: bootstrapping from replica '{}''s newest snapshot",
                 ctx_.config.durable, loaded.value()->name);
  }
  IndexSnapshot& snap = *loaded.value();
  if (auto s = ingest_.restore(snap); !s.ok()) return s;
  restored_from_ = snap.name;
  spdlog::info("restored snapshot {} of '{}': {} streams, stream sequence {}", snap.id, snap.name,
               snap.watermarks.size(), snap.stream_sequence);
  return {};
}

BusStatus Snapshotter::write() {
  if (!store_) return BusError{NATS_ERR, "snapshots need JetStream mode"};
  std::lock_guard write_lock(write_mutex_);
  auto written = write_locked();
  note_outcome(written);
  if (!written.ok()) return written.error();
  return {};
}

// Caller holds write_mutex_.
BusResult<SnapshotWritten> Snapshotter::write_locked() {
  IndexSnapshot snap;
  if (!ingest_.capture(snap)) return BusError{NATS_ERR, "indexer offline: no snapshot"};
  snap.events_stream = ctx_.config.stream;
  if (ctx_.config.shard) snap.shard = to_string(*ctx_.config.shard);
  auto written = store_->write(snap);
  if (!written.ok()) return written.error();
  spdlog::info(
      "snapshot written: {} events in {} chunk(s){}, stream sequence {}", snap.events.size(), written.value().chunks,
      written.value().split_events == 0
          ? std::string()
          : " (" + std::to_string(written.value().split_events) + " long edge(s) split over " +
                std::to_string(written.value().lines - snap.events.size() + written.value().split_events) + " events)",
      snap.stream_sequence);
  return written;
}

// Caller holds write_mutex_. Every failure is counted; the log says only when the state changes:
// the first failure (with its reason) and the recovery, not every interval.
void Snapshotter::note_outcome(const BusResult<SnapshotWritten>& written) {
  const auto now = Clock::now();
  if (written.ok()) {
    ctx_.counters.snapshots_total->inc();
    last_good_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    if (failing_) {
      spdlog::info("snapshots recovered after {} failed attempt(s) over {:.0f} s", failures_in_row_,
                   std::chrono::duration<double>(now - failing_since_).count());
    }
    failing_ = false;
    failures_in_row_ = 0;
    return;
  }
  ctx_.counters.snapshot_failures_total->inc();
  ++failures_in_row_;
  last_error_ = written.error().message;
  if (!failing_) {
    failing_ = true;
    failing_since_ = now;
    spdlog::error(
        "snapshot failed: {} (retried every interval; failures are counted in "
        "kvidx_snapshot_failures_total, the recovery is logged)",
        last_error_);
  }
}

double Snapshotter::age_seconds() const {
  const Clock::time_point last{Clock::duration(last_good_.load(std::memory_order_relaxed))};
  return std::chrono::duration<double>(Clock::now() - last).count();
}

std::chrono::milliseconds Snapshotter::stale_bound() const {
  if (ctx_.config.snapshot_stale_after.count() > 0) return ctx_.config.snapshot_stale_after;
  return std::max<std::chrono::milliseconds>(3 * ctx_.config.snapshot_interval, std::chrono::seconds(60));
}

bool Snapshotter::stale() const {
  if (!store_ || ctx_.config.snapshot_interval.count() == 0) return false;
  return age_seconds() > std::chrono::duration<double>(stale_bound()).count();
}

void Snapshotter::start_timer() {
  if (ctx_.config.snapshot_interval.count() > 0)
    timer_thread_ = named_thread("kvidx-snapshot", [this] { timer_loop(); });
}

void Snapshotter::stop_timer() {
  {
    std::lock_guard lock(timer_mutex_);
    stopped_ = true;
  }
  timer_cv_.notify_all();
  if (timer_thread_.joinable()) timer_thread_.join();
}

void Snapshotter::close() { store_.reset(); }

void Snapshotter::timer_loop() {
  std::unique_lock lock(timer_mutex_);
  while (!timer_cv_.wait_for(lock, ctx_.config.snapshot_interval, [&] { return stopped_; })) {
    lock.unlock();
    // NOTE: the outcome is counted and logged (on state changes) by write itself.
    (void)write();
    lock.lock();
    const bool now_stale = stale();
    if (now_stale != stale_logged_) {
      stale_logged_ = now_stale;
      if (now_stale) {
        spdlog::error(
            "snapshot stale: the newest good snapshot is {:.1f} s old (bound {:.1f} s): not ready until "
            "one is written",
            age_seconds(), stale_bound().count() / 1000.0);
      } else {
        spdlog::info("snapshot no longer stale: ready again (if otherwise ready)");
      }
    }
  }
}

}  // namespace kvidx::bus
