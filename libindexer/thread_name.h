// Names the calling thread, as `top -H`, `ps -L`, perf, gdb and /proc/<pid>/task/<tid>/comm show
// it: every long-lived thread of kvidx names itself with a "kvidx-" prefix (lanes, ingest stages,
// timers, decoders), so an operator sees which stage burns a core.
#pragma once

#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace kvidx {

// NOTE: Linux keeps 15 bytes of a thread's name; a longer `name` is cut to its first 15.
inline constexpr std::size_t kThreadNameBytes = 15;

void name_this_thread(std::string_view name);

// The calling thread's name (empty if it cannot be read).
std::string this_thread_name();

// A thread that names itself `name`, then runs `body`: how kvidx starts its long-lived threads.
template <typename Body>
std::thread named_thread(std::string name, Body body) {
  return std::thread([name = std::move(name), body = std::move(body)]() mutable {
    name_this_thread(name);
    body();
  });
}

}  // namespace kvidx
