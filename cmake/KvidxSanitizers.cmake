# KVIDX_SANITIZE=thread|address instruments every target of the build (its own build dir).
# -Wno-maybe-uninitialized: GCC 12's instrumentation makes it report std::variant moves in
# libstdc++ as possibly uninitialized (a false positive that -Werror would turn into a failure).
# -Og (after the build type's -O2 on the command line, so it wins): instrumented code at -O2 took
# twice as long to compile (libbus/http_server.cpp under ASan+UBSan: 86 s at -O2, 43 s at -Og, on the
# 2-core VM), and a cold scripts/test spent 575 s building kvidx under ASan; the sanitizers' own
# advice is -O1 or so, for stack traces that match the source.
if(KVIDX_SANITIZE STREQUAL "thread")
  # -Wno-tsan: GCC 12 warns (an error under -Werror) that TSan does not model the
  # atomic_thread_fence inside Boost.Asio's headers; kvidx's own code uses no fences.
  add_compile_options(-Og -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan -Wno-maybe-uninitialized)
  add_link_options(-fsanitize=thread)
elseif(KVIDX_SANITIZE STREQUAL "address")
  # -fno-sanitize=vptr: UBSan's vptr check reads the vtable through a pipe() (sanitizer_common's
  # IsAccessibleMemoryRange); out of file descriptors (the fault test that runs kvidx at
  # RLIMIT_NOFILE 64) pipe() fails and every exception thrown is reported as an "invalid vptr" and
  # aborts: a false positive of the checker that suppressions cannot catch (they need descriptors).
  # -Wno-mismatched-new-delete: at -Og GCC 12 inlines msgpack's zone (its class operator new
  # mallocs, its operator delete frees) and reports the pair as mismatched (bridge/, a false
  # positive); the normal build keeps the warning.
  add_compile_options(-Og -fsanitize=address,undefined -fno-sanitize=vptr -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined -Wno-maybe-uninitialized -Wno-mismatched-new-delete)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT KVIDX_SANITIZE STREQUAL "")
  message(FATAL_ERROR "KVIDX_SANITIZE must be thread, address or empty (got '${KVIDX_SANITIZE}')")
endif()
