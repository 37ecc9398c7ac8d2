// Writes an event log (JSON Lines, one RouterEvent or capture wrapper per line) to a file or "-"
// for stdout; gzip-compressed when the path ends in ".gz".
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "libcodec/event_codec.h"

namespace kvidx {

class EventLogWriter {
 public:
  // Opens `path`; check ok()/error() before writing.
  explicit EventLogWriter(const std::string& path);
  ~EventLogWriter();
  EventLogWriter(const EventLogWriter&) = delete;
  EventLogWriter& operator=(const EventLogWriter&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  void write(const EventLogLine& line);
  void write(const RouterEvent& event);
  void write_raw_line(std::string_view json);  // one already-encoded JSON object
  // Flushes and closes; returns false (and sets error()) if any write failed.
  bool close();

  class Sink;  // plain or gzip output; defined in the .cpp

 private:
  std::unique_ptr<Sink> sink_;
  std::string path_;
  std::string error_;
  std::string buffer_;
};

// Checks, without creating anything, that an EventLogWriter could create `path`: "-" (stdout), or
// a path whose directory exists and is writable and which is not itself a directory. Empty when
// it could, otherwise one line for the user.
std::string check_output_file(const std::string& path);

}  // namespace kvidx
