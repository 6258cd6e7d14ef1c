#!/usr/bin/env bash
# Runs every test: a release build, the same tests under AddressSanitizer + UndefinedBehaviorSanitizer,
# the same tests in the portable build (otter's own matrix kernels, no OpenBLAS), and the fuzzers for a
# bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)

echo "== release build"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOTTER_WERROR=ON >/dev/null
cmake --build build/release -j"$JOBS"
ctest --test-dir build/release --output-on-failure -j"$JOBS"

echo "== ASan + UBSan build"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DOTTER_SANITIZE=ON -DOTTER_WERROR=ON >/dev/null
cmake --build build/asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j"$JOBS"

echo "== portable build (no OpenBLAS)"
cmake -S . -B build/portable -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOTTER_BLAS=OFF -DOTTER_WERROR=ON >/dev/null
cmake --build build/portable -j"$JOBS"
ctest --test-dir build/portable --output-on-failure -j"$JOBS"

echo "== fuzzers (bounded)"
CC=clang cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=Debug -DOTTER_FUZZ=ON -DOTTER_BLAS=OFF -DOTTER_BUILD_TESTS=OFF >/dev/null
cmake --build build/fuzz -j"$JOBS" --target fuzz_model_load fuzz_npy fuzz_tensor_pb fuzz_checkpoint
tools/run-fuzzers.sh build/fuzz "${OTTER_FUZZ_SECONDS:-30}"
echo "== all tests passed"
