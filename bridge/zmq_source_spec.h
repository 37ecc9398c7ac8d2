// The text form of one in-process ZMQ source, as `kvidx serve --zmq SPEC` (repeatable) and the
// config file's `zmq = [...]` take it: the engine's PUB endpoint, then comma-separated options.
//
//   tcp://127.0.0.1:5557,worker=3,block-size=16[,replay=tcp://127.0.0.1:5558][,dp-rank=0]
//       [,topic=kv-events][,eagle][,clear-on-gap][,replay-timeout-ms=2000][,cache-namespace=NS]
//
// worker and block-size are required; a bare `eagle` / `clear-on-gap` means =true (also
// `=true|false`). Keys may be written with '_' for '-'. Unknown keys, repeated keys, bad numbers
// and an endpoint without "://" are errors naming the key (CodecError.field). Endpoints cannot
// contain ',' (ZMQ tcp/ipc endpoints of engines do not).
#pragma once

#include <string>
#include <string_view>

#include "bridge/zmq_event_bridge.h"
#include "libcodec/codec_result.h"

namespace kvidx::bridge {

Decoded<ZmqBridgeConfig> parse_zmq_source_spec(std::string_view spec);

// One line describing a source (for logs and --check-config): "tcp://...:5557 worker 3 rank 0 ...".
std::string describe_zmq_source(const ZmqBridgeConfig& config);

}  // namespace kvidx::bridge
