#!/usr/bin/env bash
# Sets up (packages, build with warnings as errors), checks the lock annotations with Clang, runs
# the tests of the parsers of untrusted input under ASan+UBSan, and runs every test: unit, mount
# and end-to-end (the unit tests side by side, the others one at a time). Extra arguments go to
# ctest (e.g. -R mount), whose JUnit report is ctest-junit.xml in the build directory (.ci/run
# reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh -DCKPTFS_WERROR=ON
# The thread-safety build: Clang checks every lock annotation (core/base/thread_annotations.h).
clang_build="${CKPTFS_CLANG_BUILD_DIR:-build-clang}"
cmake -S . -B "$clang_build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
      -DCKPTFS_THREAD_SAFETY=ON -DCKPTFS_WERROR=ON -DCKPTFS_BUILD_TESTS=OFF >/dev/null
cmake --build "$clang_build" -j"$(nproc)"
echo "test: the thread-safety build is clean"
# The tensor views' readers (their fuzz test included), the options parser, the checksum
# records' and manifests' parsers and verifier, and the remote tier's parsers (s3:// locations, the AWS shared
# files, S3's XML answers) under ASan+UBSan:
# only their tests are built, unoptimized (a third of the compile time of -O2 -g; assertions on).
asan_build="${CKPTFS_ASAN_BUILD_DIR:-build-asan-parsers}"
asan_tests=(tensor_view_fuzz_test pickle_reader_test zip_reader_test tensor_grid_test
            tensor_views_test options_test checksum_test verifier_test checksum_manifest_test
            remote_parsers_test)
cmake -S . -B "$asan_build" -DCMAKE_BUILD_TYPE=Debug -DCKPTFS_SANITIZE=address \
      -DCKPTFS_WERROR=ON >/dev/null
cmake --build "$asan_build" -j"$(nproc)" --target "${asan_tests[@]}"
for t in "${asan_tests[@]}"; do
  "$asan_build/tests/$t" --gtest_brief=1
done
echo "test: the parsers' tests pass under ASan+UBSan"
cd "${CKPTFS_BUILD_DIR:-build}"
ctest -j"$(nproc)" --output-on-failure --timeout 900 --output-junit "$PWD/ctest-junit.xml" "$@"
