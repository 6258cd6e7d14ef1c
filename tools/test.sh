#!/usr/bin/env bash
# Runs every test: clang-format over the sources, a release build (its numeric tests again under each OpenBLAS
# kernel the CPU can run), a Release (-O3) build, the same tests under AddressSanitizer + UndefinedBehaviorSanitizer,
# the same tests in the portable build (otter's own matrix kernels, no OpenBLAS), the WebAssembly build and its
# Node tests, and the fuzzers for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)

echo "== clang-format (the .clang-format at the root)"
git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror

echo "== release build"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOTTER_WERROR=ON >/dev/null
cmake --build build/release -j"$JOBS"
ctest --test-dir build/release --output-on-failure -j"$JOBS"

# OpenBLAS picks its kernels per CPU (Haswell on a Zen 5 EPYC, Cooperlake on an AVX-512 Zen 4, ...) and each sums in
# its own order. It does otter's double products everywhere and its float products on CPUs without AVX2 (otter's own
# kernels do them elsewhere): the numeric tests' tolerances must hold under every kernel, not only the one this
# machine gets. Kernels the CPU can't run (their instructions are missing from /proc/cpuinfo) are skipped.
NUMERIC_TESTS='^test_(training_torch|torch_grads|losses_torch|training_ort|artifacts_ort|gemm|conv_algos|training_ops'
NUMERIC_TESTS+='|training|grad|kernels_elementwise|kernels_extra|fuse|runtime)$'
cpu_has() { for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }
for core in Sandybridge:avx Haswell:avx2,fma Zen:avx2,fma SkylakeX:avx512f,avx512bw,avx512vl \
            Cooperlake:avx512f,avx512bw,avx512vl,avx512_bf16; do
  name=${core%%:*} flags=${core#*:}
  if ! cpu_has ${flags//,/ }; then
    echo "== numeric tests, OPENBLAS_CORETYPE=$name: skipped (the CPU lacks one of $flags)"
    continue
  fi
  echo "== numeric tests, OPENBLAS_CORETYPE=$name"
  OPENBLAS_CORETYPE=$name ctest --test-dir build/release --output-on-failure -j"$JOBS" -R "$NUMERIC_TESTS"
done

# -O3 warns where -O2 doesn't (maybe-uninitialized after inlining): the library and CLI as users build them.
echo "== Release (-O3) build, warnings as errors"
cmake -S . -B build/o3 -DCMAKE_BUILD_TYPE=Release -DOTTER_WERROR=ON -DOTTER_BUILD_TESTS=OFF >/dev/null
cmake --build build/o3 -j"$JOBS" --target otter otter_cli

echo "== ASan + UBSan build"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DOTTER_SANITIZE=ON -DOTTER_WERROR=ON >/dev/null
cmake --build build/asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j"$JOBS" -LE heavy

echo "== portable build (no OpenBLAS)"
cmake -S . -B build/portable -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOTTER_BLAS=OFF -DOTTER_WERROR=ON >/dev/null
cmake --build build/portable -j"$JOBS"
ctest --test-dir build/portable --output-on-failure -j"$JOBS"

echo "== WebAssembly build and tests"
tools/build-web.sh
# Configuring again registers the web tests, now that web/dist/ exists.
cmake -S . -B build/release >/dev/null
ctest --test-dir build/release --output-on-failure -R '^test_web_'

echo "== fuzzers (bounded)"
CC=clang cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=Debug -DOTTER_FUZZ=ON -DOTTER_BLAS=OFF -DOTTER_BUILD_TESTS=OFF >/dev/null
cmake --build build/fuzz -j"$JOBS" --target fuzz_model_load fuzz_npy fuzz_tensor_pb fuzz_checkpoint \
  fuzz_image_decoder
tools/run-fuzzers.sh build/fuzz "${OTTER_FUZZ_SECONDS:-30}"
echo "== all tests passed"
