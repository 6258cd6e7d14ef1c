#!/usr/bin/env bash
# Speed and peak memory on real architectures (torchvision CNNs, GRU/LSTM text classifiers, a 4-layer d=256
# transformer encoder): otter's inference against onnxruntime-node at batch 1 and 32, otter's training steps
# against PyTorch at batch 32, 1 and 2 threads, alternating rounds, ratios and peak RSS (bench/real_models.py).
#   bench/real_models.sh [BUILD_DIR] [real_models.py options: --rounds N --model NAME --no-infer --no-train]
# Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
shift || true
[ -x "$BUILD/bench/bench_runtime" ] && [ -x "$BUILD/bench/bench_training" ] && [ -x "$BUILD/otter" ] || {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target bench_runtime bench_training otter_cli >/dev/null
}
NPM="$BUILD/npm"
[ -d "$NPM/node_modules/onnxruntime-node" ] || npm install --silent --ignore-scripts --no-audit --no-fund --prefix "$NPM" onnxruntime-node >/dev/null
exec /usr/bin/python3 bench/real_models.py "$BUILD" "$NPM" "$@"
