// prefetch_line: asks the CPU to start loading the cache line holding `address` (a hint: never
// faults, never waits). Used where a run of random table lookups is known before it is made.
#pragma once

namespace kvidx {

inline void prefetch_line(const void* address) {
#if defined(__x86_64__)
  // NOTE: not __builtin_prefetch: GCC 12's dead-code elimination removes a loop whose only effect
  // is __builtin_prefetch (checked with -O2/-O3: no prefetcht0 left), so it is written as asm.
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address);
#endif
}

}  // namespace kvidx
