#!/usr/bin/env bash
# Attention's gradient: the fused com.otter AttentionGrad against the MatMul/Softmax/MatMul decomposition,
# both differentiated by otter (forward + backward per step, dQ, dK and dV returned).
#   bench/bench_attention_grad.sh [BUILD_DIR]     (default build/release; built if missing)
# Shapes [B, H, L, D] of a small encoder (4x8x128x64) and a longer sequence (1x8x512x64), at 1 and 2 threads.
# Each variant is its own process (peak RSS is its own); they alternate ROUNDS times (default 3) and a row
# shows the medians over the rounds. Prints fused/decomposed time (< 1: the fused kernel is faster) and RSS.
# Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-10}
[ -x "$BUILD/bench/bench_attention_grad" ] || {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$BUILD" -j"$(nproc)" --target bench_attention_grad >/dev/null
}
field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf "%-14s %7s %12s %12s %8s %10s %10s\n" shape threads fused_ms decomp_ms ratio fused_MB decomp_MB
for shape in "4 8 128 64" "1 8 512 64"; do
  for threads in 1 2; do
    fm=() dm=() fr=() dr=()
    for _ in $(seq "$ROUNDS"); do
      f=$("$BUILD/bench/bench_attention_grad" fused "$threads" "$STEPS" $shape)
      d=$("$BUILD/bench/bench_attention_grad" decomposed "$threads" "$STEPS" $shape)
      fm+=("$(field median_ms <<<"$f")") dm+=("$(field median_ms <<<"$d")")
      fr+=("$(field peak_rss_kb <<<"$f")") dr+=("$(field peak_rss_kb <<<"$d")")
    done
    F=$(printf "%s\n" "${fm[@]}" | median) D=$(printf "%s\n" "${dm[@]}" | median)
    FR=$(printf "%s\n" "${fr[@]}" | median) DR=$(printf "%s\n" "${dr[@]}" | median)
    printf "%-14s %7s %12.3f %12.3f %8.3f %10.1f %10.1f\n" "${shape// /x}" "$threads" "$F" "$D" \
      "$(awk -v a="$F" -v b="$D" 'BEGIN {print a / b}')" "$(awk -v k="$FR" 'BEGIN {print k / 1024}')" \
      "$(awk -v k="$DR" 'BEGIN {print k / 1024}')"
  done
done
