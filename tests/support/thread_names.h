// The names of this process's threads, as the kernel reports them (/proc/self/task/*/comm): what
// `top -H` and perf show.
#pragma once

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>

namespace kvidx::testing {

inline std::set<std::string> thread_names() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  return names;
}

}  // namespace kvidx::testing
