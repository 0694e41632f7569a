#!/usr/bin/env bash
# Sets up (packages, build with warnings as errors) and runs every test: unit, mount and
# end-to-end. Extra arguments go to ctest (e.g. -R mount).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh -DCKPTFS_WERROR=ON
cd "${CKPTFS_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 "$@"
