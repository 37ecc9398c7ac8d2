# Every dependency comes from a Debian package (see scripts/install-deps); nothing is downloaded.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
# NOTE: Debian 12's cnats CMake config references a missing static lib; pkg-config libnats works.
pkg_check_modules(NATS REQUIRED IMPORTED_TARGET libnats>=3.4)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(spdlog 1.10 REQUIRED)
find_package(doctest 2.4 REQUIRED)
find_package(CLI11 2.1 REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(benchmark REQUIRED)
find_package(ZLIB REQUIRED)
# gzip logs are inflated with ISA-L's igzip (replay/gz_input.cpp): ~5x zlib's inflate.
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)
# nkey seeds (libbus/nats_nkey.h): Ed25519 from OpenSSL, which nats.c links already.
find_package(OpenSSL 3 REQUIRED)
# vLLM / SGLang bridge (bridge/): libzmq via pkg-config; cppzmq and msgpack-cxx are header-only and
# their Debian 12 CMake configs work (cppzmq's falls back to its own pkg-config FindZeroMQ, which
# defines the `libzmq` target; msgpack-cxx 4.x installs its config as `msgpack`, target
# `msgpackc-cxx`, and pulls in Boost headers).
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq>=4.3)
find_package(cppzmq 4.9 REQUIRED)
find_package(msgpack 4.1 REQUIRED CONFIG)
