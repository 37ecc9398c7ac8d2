#include <stdexcept>

#include "bench/app/commands.h"

namespace kvidx::bench {

std::vector<EngineKind> CommonArgs::engine_kinds() const {
  std::vector<EngineKind> out;
  for (const EngineKind kind : kAllEngines) {
    for (const auto& name : engines) {
      if (name == engine_name(kind)) {
        out.push_back(kind);
        break;
      }
    }
  }
  for (const auto& name : engines) {
    bool known = false;
    for (const EngineKind kind : kAllEngines) known = known || name == engine_name(kind);
    if (!known)
      throw std::invalid_argument("unknown engine '" + name + "' (kvidx, mutex-radix, flat-hash, positional)");
  }
  return out;
}

}  // namespace kvidx::bench
