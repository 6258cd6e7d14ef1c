#!/usr/bin/env bash
# Inference speed, otter against ONNX Runtime (onnxruntime-node, installed with --ignore-scripts into
# the build tree) on the same models, batches and thread counts, side by side in one run.
#   bench/bench_runtime.sh [BUILD_DIR]     (default build/release; built if missing)
# Prints the latency of ORT and of otter at opt level 2 (the default: rounding error of the direct
# algorithms, Winograd F(2x2, 3x3) included) and 3 (Winograd F(4x4, 3x3), ~1e-4), the ratios
# ORT/otter (> 1: otter faster) and peak RSS. ROUNDS=N (default 3) sets how many times each
# configuration alternates the three (3N times where runs are cheap). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
[ -x "$BUILD/bench/bench_runtime" ] || { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target bench_runtime >/dev/null; }
NPM="$BUILD/npm"
[ -d "$NPM/node_modules/onnxruntime-node" ] || npm install --silent --ignore-scripts --no-audit --no-fund --prefix "$NPM" onnxruntime-node >/dev/null
MODELS="$BUILD/bench/models"
mkdir -p "$MODELS"
"$BUILD/bench/bench_runtime" --make "$MODELS"
ORT_VERSION=$(node -p "require('$PWD/$NPM/node_modules/onnxruntime-node/package.json').version")
ROUNDS=${ROUNDS:-3}
# One-thread rows run both sides on one CPU (CPU=N, default the last this process may use): the VM's two
# CPUs can differ by 2x on memory-bound work, and which one is slow changes over the day.
CPU=${CPU:-$(/usr/bin/python3 -c 'import os; print(max(os.sched_getaffinity(0)))')}
pin() { if [ "$1" = 1 ]; then echo taskset -c "$CPU"; fi; }
echo "otter vs ONNX Runtime $ORT_VERSION (onnxruntime-node); ratio = ORT / otter (> 1: otter faster)"
echo "otter L2: opt level 2 (the default: fusions, Winograd F(2x2,3x3), errors ~1e-6); L3: Winograd F(4x4,3x3) (~1e-4)"
echo "The VM's speed drifts by 10-40% within minutes, so each row runs $ROUNDS rounds (3x that where runs are cheap) of ORT, L2, L3 in turn;"
echo "ms = the median of the rounds' medians; 'min' ratios compare the fastest single runs (least disturbed)."
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; one-thread rows run both sides on CPU $CPU"
printf '%-13s %5s %7s %9s %9s %9s %8s %8s %8s %8s %8s %8s\n' model batch threads "ORT ms" "L2 ms" "L3 ms" "ratio L2" \
  "ratio L3" "min L2" "min L3" "otter MB" "ORT MB"
for model in mnist_dnn cifar10_cnn resnet_stack; do
  for batch in 1 64; do
    for threads in 1 2; do
      # The VM's speed flips between two modes for seconds at a time: where runs are cheap, about a
      # second of them a configuration, in 3x as many rounds, so that both sides see both modes.
      rounds=$((3 * ROUNDS))
      case "$model/$batch" in
      mnist_dnn/*) runs=1500 ;;
      cifar10_cnn/1) runs=600 ;;
      resnet_stack/1) runs=200 ;;
      *) runs=20 rounds=$ROUNDS ;;
      esac
      runs=$(((runs + rounds - 1) / rounds))
      lines=()
      for _ in $(seq "$rounds"); do
        # shellcheck disable=SC2046
        lines+=("ort $($(pin "$threads") node bench/ort_infer.js "$NPM" "$MODELS/$model.onnx" "$batch" "$threads" "$runs")")
        # shellcheck disable=SC2046
        lines+=("l2 $($(pin "$threads") "$BUILD/bench/bench_runtime" "$MODELS/$model.onnx" "$batch" "$threads" "$runs" 2)")
        # shellcheck disable=SC2046
        lines+=("l3 $($(pin "$threads") "$BUILD/bench/bench_runtime" "$MODELS/$model.onnx" "$batch" "$threads" "$runs" 3)")
      done
      printf '%s\n' "${lines[@]}" | /usr/bin/python3 -c '
import json, statistics, sys
m, b, t = sys.argv[1:]
runs = {}
for line in sys.stdin:
    who, js = line.split(" ", 1)
    runs.setdefault(who, []).append(json.loads(js))
med = {k: statistics.median(r["median_ms"] for r in v) for k, v in runs.items()}
best = {k: min(r["min_ms"] for r in v) for k, v in runs.items()}
rss = {k: max(r["peak_rss_kb"] for r in v) / 1024 for k, v in runs.items()}
o, l2, l3 = med["ort"], med["l2"], med["l3"]
bo, b2, b3 = best["ort"], best["l2"], best["l3"]
mb, mb_ort = max(rss["l2"], rss["l3"]), rss["ort"]
print(f"{m:<13} {b:>5} {t:>7} {o:9.3f} {l2:9.3f} {l3:9.3f} {o / l2:8.2f} {o / l3:8.2f} {bo / b2:8.2f} "
      f"{bo / b3:8.2f} {mb:8.1f} {mb_ort:8.1f}")' "$model" "$batch" "$threads"
    done
  done
done
