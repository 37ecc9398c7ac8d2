// The decoder's verdict on the shared wire corpus must equal the JSON Schemas' verdict
// (tests/schemas/validate_schemas.py checks the schema side of the same files).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "libcodec/event_codec.h"
#include "libcodec/query_codec.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Decoder for the schema a corpus file is named after; null for schemas decoded elsewhere.
bool decodes(const std::string& schema, const std::string& text, std::string& reason) {
  auto report = [&reason](const auto& decoded) {
    if (!decoded.ok()) reason = decoded.error().message();
    return decoded.ok();
  };
  if (schema == "router-event") return report(kvidx::decode_router_event(text));
  if (schema == "events-message") return report(kvidx::decode_router_events(text));
  if (schema == "event-log") return report(kvidx::decode_event_log_line(text));
  if (schema == "score-query-request") return report(kvidx::decode_score_request(text));
  throw std::invalid_argument("no decoder for " + schema);
}

}  // namespace

TEST_CASE("the decoder agrees with the schemas on every wire corpus file") {
  int checked = 0;
  for (const char* verdict : {"valid", "invalid"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(KVIDX_SOURCE_DIR) / "tests/data/wire" / verdict)) {
      const std::string name = entry.path().filename().string();
      const std::string schema = name.substr(0, name.find('.'));
      if (schema == "score-query-reply") continue;  // the client's decoder: query_codec_test.cpp
      std::string reason;
      const bool ok = decodes(schema, read_file(entry.path()), reason);
      CAPTURE(name);
      CAPTURE(reason);
      CHECK(ok == (std::string(verdict) == "valid"));
      if (!ok) CHECK_FALSE(reason.empty());
      ++checked;
    }
  }
  CHECK(checked >= 15);
}
