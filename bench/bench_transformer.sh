#!/usr/bin/env bash
# Transformer-encoder inference, otter against ONNX Runtime (onnxruntime-node, installed with
# --ignore-scripts into the build tree as bench_runtime.sh does), same model files, side by side.
#   bench/bench_transformer.sh [BUILD_DIR]     (default build/release; bench_runtime built if missing)
# The model (bench_transformer.py): 2 pre-norm layers, d=256, 4 heads, 128 tokens, RMSNormalization-23,
# RotaryEmbedding-23, Attention-23, Gelu-20 (tanh), at batch 1 and 8, static shapes; then each of those
# operators alone at batch 8 (--op), since the encoder's time is mostly its matrix products. ORT runs them
# at opset 23 as they are. Each row alternates ROUNDS (default 5) rounds of ORT and otter (bench_runtime,
# opt level 2); ms = the median of the rounds' medians; ratio = ORT / otter (> 1: otter faster).
# Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
[ -x "$BUILD/bench/bench_runtime" ] || { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target bench_runtime >/dev/null; }
NPM="$BUILD/npm"
[ -d "$NPM/node_modules/onnxruntime-node" ] || npm install --silent --ignore-scripts --no-audit --no-fund --prefix "$NPM" onnxruntime-node >/dev/null
MODELS="$BUILD/bench/models"
mkdir -p "$MODELS"
for batch in 1 8; do /usr/bin/python3 bench/bench_transformer.py "$MODELS/transformer_b$batch.onnx" "$batch"; done
ORT_VERSION=$(node -p "require('$PWD/$NPM/node_modules/onnxruntime-node/package.json').version")
ROUNDS=${ROUNDS:-5}
# Which kernels do otter's float products (src/runtime/ops/gemm.c: its own wherever the CPU has AVX2 and FMA).
if grep -qw avx512f /proc/cpuinfo; then
  GEMM="otter's AVX-512 kernels"
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  GEMM="otter's AVX2 kernels"
else
  GEMM="OpenBLAS (the CPU lacks AVX2)"
fi
echo "otter vs ONNX Runtime $ORT_VERSION (onnxruntime-node): 2-layer encoder, d=256, 4 heads, 128 tokens, opset 23"
echo "ratio = ORT / otter (> 1: otter faster); $ROUNDS alternating rounds per row, ms = median of the rounds' medians"
echo "otter's matrix products: $GEMM; load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
# One row: ROUNDS alternating rounds of ORT and otter on MODEL, then medians, ratio and peak RSS.
row() {
  local label=$1 model=$2 batch=$3 threads=$4 runs=$5 lines=()
  for _ in $(seq "$ROUNDS"); do
    lines+=("ort $(node bench/ort_transformer.js "$NPM" "$model" "$threads" "$runs")")
    lines+=("otter $("$BUILD/bench/bench_runtime" "$model" "$batch" "$threads" "$runs" 2)")
  done
  printf '%s\n' "${lines[@]}" | /usr/bin/python3 -c '
import json, statistics, sys
label, t = sys.argv[1:]
runs = {}
for line in sys.stdin:
    who, js = line.split(" ", 1)
    runs.setdefault(who, []).append(json.loads(js))
med = {k: statistics.median(r["median_ms"] for r in v) for k, v in runs.items()}
best = {k: min(r["min_ms"] for r in v) for k, v in runs.items()}
rss = {k: max(r["peak_rss_kb"] for r in v) / 1024 for k, v in runs.items()}
o, m, bo, bm = med["ort"], med["otter"], best["ort"], best["otter"]
mb_otter, mb_ort = rss["otter"], rss["ort"]
print(f"{label:<20} {t:>7} {o:9.3f} {m:9.3f} {o / m:8.2f} {bo / bm:8.2f} {mb_otter:9.1f} {mb_ort:8.1f}")' "$label" "$threads"
}
printf '%-20s %7s %9s %9s %8s %8s %9s %8s\n' model threads "ORT ms" "otter ms" ratio "min rat" "otter MB" "ORT MB"
for batch in 1 8; do
  for threads in 1 2; do
    row "encoder b$batch" "$MODELS/transformer_b$batch.onnx" "$batch" "$threads" $((batch == 1 ? 40 : 8))
  done
done
# The new operators alone at batch 8 (the encoder's time is mostly its matrix products).
for op in attention causal_attention rms rotary gelu; do
  /usr/bin/python3 bench/bench_transformer.py "$MODELS/op_$op.onnx" 8 --op "$op"
  for threads in 1 2; do row "$op b8" "$MODELS/op_$op.onnx" 8 "$threads" 40; done
done
