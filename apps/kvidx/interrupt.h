// SIGINT/SIGTERM as a flag for the CLI's long-running client commands (capture, publish).
#pragma once

#include <atomic>
#include <csignal>

namespace kvidx::cli {

inline std::atomic<bool>& interrupted() {
  static std::atomic<bool> flag{false};
  return flag;
}

inline void install_interrupt_handlers() {
  auto handler = [](int) { interrupted().store(true); };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
}

}  // namespace kvidx::cli
