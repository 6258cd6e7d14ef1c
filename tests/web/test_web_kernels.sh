#!/bin/sh
# Builds tests/web/kernels_driver.c with the runtime's hot kernels twice with emscripten (with and
# without -msimd128) and runs tests/web/test_web_kernels.js on both under Node. Exits 77 (skipped)
# when emcc or node is missing. Usage: test_web_kernels.sh [build dir]
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$src/build/web-kernels}
command -v emcc >/dev/null 2>&1 && command -v node >/dev/null 2>&1 || { echo "skipped: needs emcc and node"; exit 77; }
# Debian's emscripten finds its Node modules (acorn, ...) only through NODE_PATH.
export NODE_PATH=${NODE_PATH:-/usr/share/nodejs}
mkdir -p "$out"
# The web build's warnings, as errors (cmake/web/CMakeLists.txt).
warn="-Wall -Wextra -Wpedantic -Wno-unused-parameter -Wno-missing-field-initializers -Werror"
files="tests/web/kernels_driver.c src/runtime/ops/gemm.c src/runtime/ops/fused_act.c src/runtime/ops/vec_math.c src/runtime/optim.c
       src/core/core.c src/core/tensor.c src/ir/ir.c src/runtime/session_kernel.c src/runtime/threadpool.c"
for variant in simd scalar; do
    flags=""
    [ "$variant" = simd ] && flags=-msimd128
    (cd "$src" && emcc -O2 $flags -Isrc -Iinclude $warn $files -o "$out/kernels_$variant.js" \
        -sMODULARIZE -sALLOW_MEMORY_GROWTH -sEXPORTED_RUNTIME_METHODS=UTF8ToString)
done
node "$src/tests/web/test_web_kernels.js" "$out"
