#include "libbus/nats_error.h"

#include <string>

namespace kvidx::bus {

static_assert(NATS_ERR == 1, "BusError's default status is NATS_ERR");

bool BusError::timed_out() const { return status == NATS_TIMEOUT; }

BusError nats_error(natsStatus status, std::string_view context) {
  std::string message(context);
  message += ": ";
  message += natsStatus_GetText(status);
  const char* detail = nats_GetLastError(nullptr);
  if (detail != nullptr && *detail != '\0') {
    message += " (";
    message += detail;
    message += ')';
  }
  return BusError{static_cast<int>(status), std::move(message)};
}

BusError js_error(natsStatus status, jsErrCode code, std::string_view context) {
  BusError error = nats_error(status, context);
  if (code != 0) error.message += " [JetStream error " + std::to_string(static_cast<int>(code)) + "]";
  return error;
}

}  // namespace kvidx::bus
