# kvidx_warnings: strict warnings for the project's own targets only (never for dependencies).
add_library(kvidx_warnings INTERFACE)
target_compile_options(kvidx_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wimplicit-fallthrough)
if(KVIDX_WERROR)
  target_compile_options(kvidx_warnings INTERFACE -Werror)
endif()
