#include "replay/event_log_writer.h"

#include <fmt/format.h>
#include <zlib.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace kvidx {

// Either a stdio FILE (plain) or a gzFile (".gz"); both buffered.
class EventLogWriter::Sink {
 public:
  virtual ~Sink() = default;
  virtual bool write(std::string_view bytes) = 0;
  virtual bool close() = 0;
};

namespace {

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

class PlainSink final : public EventLogWriter::Sink {
 public:
  PlainSink(std::FILE* file, bool owned) : file_(file), owned_(owned) {}
  ~PlainSink() override { close(); }
  bool write(std::string_view bytes) override {
    return std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size();
  }
  bool close() override {
    if (file_ == nullptr) return true;
    bool ok = std::fflush(file_) == 0;
    if (owned_) ok = std::fclose(file_) == 0 && ok;
    file_ = nullptr;
    return ok;
  }

 private:
  std::FILE* file_;
  bool owned_;
};

class GzipSink final : public EventLogWriter::Sink {
 public:
  explicit GzipSink(gzFile file) : file_(file) { gzbuffer(file_, 1 << 20); }
  ~GzipSink() override { close(); }
  bool write(std::string_view bytes) override {
    return gzwrite(file_, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size());
  }
  bool close() override {
    if (file_ == nullptr) return true;
    const bool ok = gzclose(file_) == Z_OK;
    file_ = nullptr;
    return ok;
  }

 private:
  gzFile file_;
};

}  // namespace

EventLogWriter::EventLogWriter(const std::string& path) : path_(path) {
  if (path == "-") {
    sink_ = std::make_unique<PlainSink>(stdout, false);
  } else if (ends_with(path, ".gz")) {
    gzFile file = gzopen(path.c_str(), "wb6");
    if (file == nullptr)
      error_ = fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno));
    else
      sink_ = std::make_unique<GzipSink>(file);
  } else {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    if (file == nullptr)
      error_ = fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno));
    else
      sink_ = std::make_unique<PlainSink>(file, true);
  }
}

EventLogWriter::~EventLogWriter() { close(); }

void EventLogWriter::write_raw_line(std::string_view json) {
  if (!ok()) return;
  buffer_.append(json);
  buffer_.push_back('\n');
  if (buffer_.size() >= (1u << 20)) {
    if (!sink_->write(buffer_)) error_ = fmt::format("{}: write failed: {}", path_, std::strerror(errno));
    buffer_.clear();
  }
}

void EventLogWriter::write(const EventLogLine& line) { write_raw_line(encode_event_log_line(line)); }

void EventLogWriter::write(const RouterEvent& event) { write_raw_line(encode_router_event(event)); }

bool EventLogWriter::close() {
  if (!sink_) return ok();
  if (ok() && !buffer_.empty() && !sink_->write(buffer_)) {
    error_ = fmt::format("{}: write failed: {}", path_, std::strerror(errno));
  }
  buffer_.clear();
  if (!sink_->close() && ok()) error_ = fmt::format("{}: close failed: {}", path_, std::strerror(errno));
  sink_.reset();
  return ok();
}

std::string check_output_file(const std::string& path) {
  if (path == "-") return {};
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) return fmt::format("{}: cannot write: is a directory", path);
    if (::access(path.c_str(), W_OK) != 0) return fmt::format("{}: cannot write: {}", path, std::strerror(errno));
    return {};
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return fmt::format("{}: cannot create: directory {} does not exist", path, dir);
  }
  if (::access(dir.c_str(), W_OK) != 0) return fmt::format("{}: cannot create: {}", path, std::strerror(errno));
  return {};
}

}  // namespace kvidx
