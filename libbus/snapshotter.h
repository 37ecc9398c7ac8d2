// When and how `kvidx serve` snapshots its index (JetStream mode): the newest snapshot restored
// at start, one written every snapshot_interval, on demand and at shutdown, and their health
// (failures counted, logged on state changes; staleness for readiness). Where they are stored is
// SnapshotStore's job (snapshot_store.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "libbus/ingest.h"
#include "libbus/service_context.h"
#include "libbus/snapshot_store.h"

namespace kvidx::bus {

class Snapshotter {
 public:
  Snapshotter(ServiceContext& ctx, Ingest& ingest);
  Snapshotter(const Snapshotter&) = delete;
  Snapshotter& operator=(const Snapshotter&) = delete;

  // Opens the snapshot stream, restores the newest snapshot into `ingest_` (when configured) and
  // registers the age gauges. Needs ctx.js.
  BusStatus open();
  void start_timer();  // the periodic writer, when snapshot_interval > 0
  void stop_timer();
  // Writes one now; every outcome is counted and logged on state changes.
  BusStatus write();
  void close();

  bool enabled() const { return store_.has_value(); }
  bool stale() const;
  double age_seconds() const;
  std::chrono::milliseconds stale_bound() const;
  // The name (durable) whose snapshot open() restored: this service's own, another replica's (a
  // bootstrap), or empty (none). Set once, before the service serves.
  const std::string& restored_from() const { return restored_from_; }

 private:
  using Clock = std::chrono::steady_clock;
  BusStatus restore();
  BusResult<SnapshotWritten> write_locked();
  void note_outcome(const BusResult<SnapshotWritten>& written);
  void timer_loop();

  ServiceContext& ctx_;
  Ingest& ingest_;
  std::optional<SnapshotStore> store_;
  std::thread timer_thread_;
  std::mutex timer_mutex_;
  std::condition_variable timer_cv_;
  bool stopped_ = false;       // guarded by timer_mutex_
  bool stale_logged_ = false;  // guarded by timer_mutex_ (timer_loop only)
  std::mutex write_mutex_;     // one snapshot at a time
  // NOTE: written by whichever thread wrote a snapshot (timer, snapshot_now, stop) under
  // write_mutex_; read by scrapes and stats through the atomic only.
  std::atomic<Clock::rep> last_good_{Clock::now().time_since_epoch().count()};
  bool failing_ = false;               // guarded by write_mutex_
  std::uint64_t failures_in_row_ = 0;  // guarded by write_mutex_
  Clock::time_point failing_since_;    // guarded by write_mutex_
  std::string last_error_;             // guarded by write_mutex_
  std::string restored_from_;
};

}  // namespace kvidx::bus
