#include "libindexer/protocol.h"

namespace kvidx {

std::string_view to_string(StorageTier tier) {
  switch (tier) {
    case StorageTier::device: return "device";
    case StorageTier::host_pinned: return "host_pinned";
    case StorageTier::disk: return "disk";
    case StorageTier::external: return "external";
  }
  return "device";
}

std::optional<StorageTier> storage_tier_from_string(std::string_view name) {
  for (auto tier : kStorageTiers) {
    if (to_string(tier) == name) return tier;
  }
  return std::nullopt;
}

std::string_view to_string(EventKind kind) {
  switch (kind) {
    case EventKind::stored: return "stored";
    case EventKind::removed: return "removed";
    case EventKind::cleared: return "cleared";
  }
  return "unknown";
}

}  // namespace kvidx
