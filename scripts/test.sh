#!/usr/bin/env bash
# Sets up (packages, build with warnings as errors), checks the lock annotations with Clang, and
# runs every test: unit, mount and end-to-end. Extra arguments go to ctest (e.g. -R mount), whose
# JUnit report is ctest-junit.xml in the build directory (.ci/run reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh -DCKPTFS_WERROR=ON
# The thread-safety build: Clang checks every lock annotation (core/thread_annotations.h).
clang_build="${CKPTFS_CLANG_BUILD_DIR:-build-clang}"
cmake -S . -B "$clang_build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
      -DCKPTFS_THREAD_SAFETY=ON -DCKPTFS_WERROR=ON -DCKPTFS_BUILD_TESTS=OFF >/dev/null
cmake --build "$clang_build" -j"$(nproc)"
echo "test: the thread-safety build is clean"
cd "${CKPTFS_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 --output-junit "$PWD/ctest-junit.xml" "$@"
