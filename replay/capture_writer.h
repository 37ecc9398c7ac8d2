// Turns live bus messages into event-log lines: each RouterEvent of a message (one event or a
// batch) becomes one line wrapped with the receive time and subject. Transport-agnostic: the
// caller (apps/) feeds it messages from whatever subscription it holds. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "replay/event_log_writer.h"

namespace kvidx {

struct CaptureStats {
  std::uint64_t messages = 0;
  std::uint64_t events = 0;
  std::uint64_t bad_messages = 0;  // not RouterEvent JSON: counted, not written
  std::string first_bad_reason;
};

class CaptureWriter {
 public:
  explicit CaptureWriter(const std::string& path) : writer_(path) {}

  bool ok() const { return writer_.ok(); }
  const std::string& error() const { return writer_.error(); }

  // Returns the number of events written for this message (0 for a bad one).
  std::size_t on_message(std::string_view subject, std::string_view payload, double receive_ts);
  CaptureStats stats() const;
  bool close();

 private:
  mutable std::mutex mutex_;
  EventLogWriter writer_;
  CaptureStats stats_;
};

}  // namespace kvidx
