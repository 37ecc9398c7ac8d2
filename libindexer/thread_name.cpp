#include "libindexer/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <array>

namespace kvidx {

void name_this_thread(std::string_view name) {
  std::array<char, kThreadNameBytes + 1> buffer{};
  const std::size_t n = std::min(name.size(), kThreadNameBytes);
  std::copy_n(name.data(), n, buffer.data());
  // A failure leaves the inherited name: naming is for people reading `top`, never for logic.
  (void)pthread_setname_np(pthread_self(), buffer.data());
}

std::string this_thread_name() {
  std::array<char, kThreadNameBytes + 1> buffer{};
  if (pthread_getname_np(pthread_self(), buffer.data(), buffer.size()) != 0) return {};
  return buffer.data();
}

}  // namespace kvidx
