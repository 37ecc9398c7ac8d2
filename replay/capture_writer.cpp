#include "replay/capture_writer.h"

namespace kvidx {

std::size_t CaptureWriter::on_message(std::string_view subject, std::string_view payload, double receive_ts) {
  auto decoded = decode_router_events(payload);
  std::lock_guard lock(mutex_);
  ++stats_.messages;
  if (!decoded.ok()) {
    if (stats_.bad_messages++ == 0) stats_.first_bad_reason = std::string(subject) + ": " + decoded.error().message();
    return 0;
  }
  EventLogLine line;
  line.ts = receive_ts;
  line.subject = std::string(subject);
  for (auto& event : decoded.value()) {
    line.event = std::move(event);
    writer_.write(line);
  }
  stats_.events += decoded.value().size();
  return decoded.value().size();
}

CaptureStats CaptureWriter::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

bool CaptureWriter::close() {
  std::lock_guard lock(mutex_);
  return writer_.close();
}

}  // namespace kvidx
