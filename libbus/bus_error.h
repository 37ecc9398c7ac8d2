// The error of every libbus call, without nats.c: headers that only pass results along (service.h,
// and through it apps and tests) stay free of <nats/nats.h>. Failed nats.c calls are turned into a
// BusError by nats_error.h.
#pragma once

#include <string>

#include "libindexer/result.h"

namespace kvidx::bus {

struct BusError {
  int status = 1;       // the nats.c natsStatus (compare with NATS_* from nats_error.h); NATS_ERR = 1
  std::string message;  // "<context>: <status text> (<last error detail>)"

  bool timed_out() const;  // status == NATS_TIMEOUT
};

// Outcome of an operation without a value, and of one producing a T (libindexer/result.h).
using BusStatus = Status<BusError>;
template <class T>
using BusResult = Result<T, BusError>;

}  // namespace kvidx::bus
