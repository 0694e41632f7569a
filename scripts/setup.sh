#!/usr/bin/env bash
# Installs what ckptfs needs and builds it into build/ (or $CKPTFS_BUILD_DIR):
#   - Debian packages for the C++ side (and fuse3's fusermount3 and mount.fuse3; clang for the
#     thread-safety build of scripts/test.sh; for the tests of packaging: promtool from
#     prometheus, dpkg-dev and fakeroot for the .deb, systemd-analyze from systemd, man-db; ip and
#     tc of iproute2 and nft for the tests' network namespaces and their slow, lossy links,
#     iperf3 for the replication bench);
#   - a Python virtual environment in .venv/ with the pinned packages of scripts/requirements.txt
#     (torch first, alone, so that nothing pulls a newer torch) and, editable, the package
#     ckptfs_testing of tests/support that the Python tests and the bench import;
#   - the build, with extra arguments passed to cmake, e.g. -DCKPTFS_SANITIZE=address.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ clang pkg-config libfuse3-dev fuse3 liburing-dev libspdlog-dev libgtest-dev
          libgmock-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libsystemd-dev
          libisal-dev libcurl4-openssl-dev libexpat1-dev libssl-dev
          python3 python3-venv
          prometheus dpkg-dev fakeroot systemd man-db iproute2 nftables iperf3)
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

venv="$PWD/.venv"
stamp="$venv/.requirements-installed"
if ! cmp -s scripts/requirements.txt "$stamp"; then
  echo "setup: installing the Python packages into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$(grep '^torch==' scripts/requirements.txt)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
  cp scripts/requirements.txt "$stamp"
fi
# The Python support of the tests and the bench (tests/support), editable: this checkout's.
support="$("$venv/bin/python" -c 'import ckptfs_testing, os; print(os.path.dirname(os.path.dirname(ckptfs_testing.__file__)))' 2>/dev/null || true)"
if [ "$support" != "$PWD/tests/support" ]; then
  echo "setup: installing tests/support into $venv (editable)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e tests/support
fi

build="${CKPTFS_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPTFS_PYTHON="$venv/bin/python" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
echo "setup: built $build/ckptfs"
