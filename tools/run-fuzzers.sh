#!/bin/sh
# Run every libFuzzer target for a bounded time; exit 1 if any finds a crash, leak or sanitizer error.
#   tools/run-fuzzers.sh BUILD_DIR SECONDS
# BUILD_DIR is configured with:  CC=clang cmake -S . -B BUILD_DIR -DOTTER_FUZZ=ON -DOTTER_BLAS=OFF
# Seeds: fuzz/corpus/<kind>/ (committed), plus the small models and tensors of libonnx-testdata when
# installed. What a run learns goes to BUILD_DIR/fuzz/work/<target>/, crashes to BUILD_DIR/fuzz/artifacts/.
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR SECONDS" >&2
    exit 2
fi
build=$1
secs=$2
src=$(cd "$(dirname "$0")/.." && pwd)
testdata=/usr/share/libonnx-testdata/data
status=0

run() { # target seed-kind max_len
    target=$1 kind=$2 maxlen=$3
    exe=$build/fuzz/$target
    if [ ! -x "$exe" ]; then
        echo "run-fuzzers: $exe not built (configure with CC=clang -DOTTER_FUZZ=ON)" >&2
        status=1
        return
    fi
    work=$build/fuzz/work/$target
    arts=$build/fuzz/artifacts
    mkdir -p "$work" "$arts"
    seeds="$src/fuzz/corpus/$kind"
    extra=$build/fuzz/seeds/$kind
    mkdir -p "$extra"
    if [ -d "$testdata" ] && [ -z "$(ls -A "$extra")" ]; then
        case $kind in
        model) find "$testdata" -name model.onnx -size -4k | while read -r f; do
                   cp "$f" "$extra/$(echo "$f" | sed "s|$testdata/||; s|/|_|g")"; done ;;
        pb) find "$testdata" -name '*.pb' -size -2k | head -300 | while read -r f; do
                cp "$f" "$extra/$(echo "$f" | sed "s|$testdata/||; s|/|_|g")"; done ;;
        esac
    fi
    echo "== $target: $secs s (seeds: $seeds $extra)"
    log=$build/fuzz/$target.log
    "$exe" "$work" "$seeds" "$extra" -max_total_time="$secs" -max_len="$maxlen" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$arts/$target-" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    grep -E '^#[0-9]+.*(DONE|INITED)|stat::number_of_executed_units|stat::new_units_added' "$log" | tail -3
    if [ $rc -ne 0 ]; then
        echo "run-fuzzers: $target FAILED (exit $rc); log: $log" >&2
        grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -20 >&2
        status=1
    fi
}

run fuzz_model_load model 1048576
run fuzz_npy npy 1024
run fuzz_tensor_pb pb 1048576
run fuzz_checkpoint checkpoint 4096
run fuzz_image_decoder image 65536
if [ $status -eq 0 ]; then echo "run-fuzzers: no crashes"; fi
exit $status
