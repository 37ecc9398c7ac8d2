# Shared by the scripts: Debian package install and the CMake build. Source it, don't run it.
# shellcheck shell=bash

KVIDX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVIDX_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  nats-server libnats-dev nlohmann-json3-dev libboost-dev libspdlog-dev libfmt-dev
  doctest-dev libcli11-dev libxxhash-dev libbenchmark-dev zlib1g-dev libisal-dev python3 python3-jsonschema
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libssl-dev openssl
)

log() { printf '\033[1m[kvidx]\033[0m %s\n' "$*" >&2; }

# Install the Debian packages that are missing (skips apt entirely when all are present).
install_deps() {
  local missing=()
  for pkg in "${KVIDX_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure_project SOURCE_DIR BUILD_DIR [cmake -D options...] — Ninja, RelWithDebInfo unless
# overridden (a later -DCMAKE_BUILD_TYPE wins). Goes through ccache when installed, so rebuilds and
# extra build dirs with the same flags are cheap.
configure_project() {
  local source=$1 dir=$2; shift 2
  local launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
  # Paths relative to the checkout, so clones and build dirs elsewhere share cache entries.
  export CCACHE_BASEDIR="$KVIDX_ROOT" CCACHE_NOHASHDIR=true
  # --no-warn-unused-cli: a C++-only project (fuzz/) has no use for the C launcher.
  cmake -S "$source" -B "$dir" -G Ninja --no-warn-unused-cli -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >/dev/null
}

# configure BUILD_DIR [cmake -D options...] — configure_project of kvidx itself.
configure() { configure_project "$KVIDX_ROOT" "$@"; }

# configure_and_build BUILD_DIR [cmake -D options...] — configure, then build every target.
configure_and_build() {
  configure "$@"
  cmake --build "$1" -j "$(nproc)"
}
