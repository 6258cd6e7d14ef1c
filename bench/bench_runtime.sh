#!/usr/bin/env bash
# Inference speed, otter against ONNX Runtime (onnxruntime-node, installed with --ignore-scripts into
# the build tree) on the same models, batches and thread counts, side by side in one run.
#   bench/bench_runtime.sh [BUILD_DIR]     (default build/release; built if missing)
# Prints median latency of each, the ratio ORT/otter (> 1: otter faster) and peak RSS. Not a test.
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
echo "otter vs ONNX Runtime $ORT_VERSION (onnxruntime-node), median of N runs; ratio = ORT / otter (> 1: otter faster)"
printf '%-14s %5s %7s %12s %12s %7s %14s %14s\n' model batch threads "otter ms" "ORT ms" ratio "otter RSS MB" "ORT RSS MB"
for model in mnist_dnn cifar10_cnn resnet_stack; do
  for batch in 1 64; do
    for threads in 1 2; do
      runs=200
      [ "$model" != mnist_dnn ] && [ "$batch" = 64 ] && runs=20
      o=$("$BUILD/bench/bench_runtime" "$MODELS/$model.onnx" "$batch" "$threads" "$runs")
      r=$(node bench/ort_infer.js "$NPM" "$MODELS/$model.onnx" "$batch" "$threads" "$runs")
      /usr/bin/python3 - "$model" "$batch" "$threads" "$o" "$r" <<'PY'
import json, sys
m, b, t, o, r = sys.argv[1:]
o, r = json.loads(o), json.loads(r)
print(f"{m:<14} {b:>5} {t:>7} {o['median_ms']:12.4f} {r['median_ms']:12.4f} {r['median_ms']/o['median_ms']:7.2f} "
      f"{o['peak_rss_kb']/1024:14.1f} {r['peak_rss_kb']/1024:14.1f}   (otter arena {o['arena_bytes']/1048576:.2f} MB)")
PY
    done
  done
done
