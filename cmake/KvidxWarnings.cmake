# kvidx_warnings: strict warnings for the project's own targets only (never for dependencies).
add_library(kvidx_warnings INTERFACE)
target_compile_options(kvidx_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wimplicit-fallthrough)
if(KVIDX_WERROR)
  target_compile_options(kvidx_warnings INTERFACE -Werror)
  # GCC 12 at -O3 (Release) reports libstdc++'s own std::string and std::variant moves inlined into
  # the tests as -Wrestrict / -Wmaybe-uninitialized / -Warray-bounds (false positives of its flow
  # analysis): they stay warnings there, not errors, so a Release build of every target succeeds.
  target_compile_options(kvidx_warnings INTERFACE
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<CONFIG:Release>>:-Wno-error=restrict;-Wno-error=maybe-uninitialized;-Wno-error=array-bounds;-Wno-error=stringop-overflow>)
endif()
