#!/usr/bin/env bash
# Inference speed, otter against ONNX Runtime (onnxruntime-node, installed with --ignore-scripts into
# the build tree) on the same models, batches and thread counts, side by side in one run.
#   bench/bench_runtime.sh [BUILD_DIR]     (default build/release; built if missing)
# Prints the median latency of ORT and of otter at opt level 2 (exact algorithms, the default) and
# 3 (Winograd 3x3 convolutions), the ratios ORT/otter (> 1: otter faster) and peak RSS. Not a test.
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
echo "otter L2: opt level 2 (fusions, exact algorithms; the default); L3: also Winograd F(4x4,3x3) convolutions"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
printf '%-14s %5s %7s %10s %10s %10s %8s %8s %9s %9s\n' model batch threads "ORT ms" "L2 ms" "L3 ms" "ratio L2" \
  "ratio L3" "otter MB" "ORT MB"
for model in mnist_dnn cifar10_cnn resnet_stack; do
  for batch in 1 64; do
    for threads in 1 2; do
      runs=200
      [ "$model" != mnist_dnn ] && [ "$batch" = 64 ] && runs=20
      r=$(node bench/ort_infer.js "$NPM" "$MODELS/$model.onnx" "$batch" "$threads" "$runs")
      o2=$("$BUILD/bench/bench_runtime" "$MODELS/$model.onnx" "$batch" "$threads" "$runs" 2)
      o3=$("$BUILD/bench/bench_runtime" "$MODELS/$model.onnx" "$batch" "$threads" "$runs" 3)
      /usr/bin/python3 - "$model" "$batch" "$threads" "$r" "$o2" "$o3" <<'PY'
import json, sys
m, b, t, r, o2, o3 = sys.argv[1:]
r, o2, o3 = json.loads(r), json.loads(o2), json.loads(o3)
print(f"{m:<14} {b:>5} {t:>7} {r['median_ms']:10.3f} {o2['median_ms']:10.3f} {o3['median_ms']:10.3f} "
      f"{r['median_ms']/o2['median_ms']:8.2f} {r['median_ms']/o3['median_ms']:8.2f} "
      f"{max(o2['peak_rss_kb'], o3['peak_rss_kb'])/1024:9.1f} {r['peak_rss_kb']/1024:9.1f}")
PY
    done
  done
done
