// Errors as values for every nats.c call made through libbus: a failed call becomes a BusError
// carrying the nats.c status, its text (natsStatus_GetText) and the library's last-error detail
// (nats_GetLastError), prefixed by what kvidx was doing. Nothing in libbus throws across its API.
// The types are in bus_error.h (no nats.c there); this header adds the builders and nats.c.
#pragma once

#include <nats/nats.h>

#include <string_view>

#include "libbus/bus_error.h"

namespace kvidx::bus {

// Builds a BusError from a failed nats.c status; call right after the failing call so
// nats_GetLastError still describes it (it is thread-local in nats.c).
BusError nats_error(natsStatus status, std::string_view context);
// Same, with a JetStream API error code when the server gave one.
BusError js_error(natsStatus status, jsErrCode code, std::string_view context);

}  // namespace kvidx::bus
