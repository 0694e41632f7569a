#!/usr/bin/env bash
# Installs the Debian packages ckptfs needs and builds it into build/ (or $CKPTFS_BUILD_DIR).
# Extra arguments are passed to cmake, e.g. -DCKPTFS_SANITIZE=address.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ pkg-config libfuse3-dev fuse3 liburing-dev libspdlog-dev libgtest-dev
          libgmock-dev nlohmann-json3-dev libcli11-dev libbenchmark-dev
          python3-torch python3-zarr python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build="${CKPTFS_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
echo "setup: built $build/ckptfs"
