#!/usr/bin/env bash
# Training throughput of otter's WebAssembly build (web/, built by tools/build-web.sh) against ONNX Runtime's web
# training build (onnxruntime-web 1.19.2), both single-threaded in one Node process (bench/web_training.js), and
# the size of each .wasm. Not a test.
#   bench/bench_web.sh [BUILD_DIR]     (default build/release: its npm/ folder and its native otter CLI, which
#                                       makes the CIFAR-10 CNN's artifacts; both built or installed if missing)
# Models: FLAT's MNIST DNN (the ORT-made fixture tests/data/ort-flat-mnist) and otter's CIFAR-10 CNN artifacts
# (CrossEntropyLoss, AdamW), batch 64, synthetic data. ROUNDS (default 5) alternating rounds of STEPS_SCALE x
# (40 MNIST / 4 CIFAR) timed steps each; samples/s from each runtime's median step.
# Prints samples/s of each, the ratio otter/ORT (> 1: otter faster) and the load average (the ratio is only as
# good as the machine is quiet).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
SCALE=${STEPS_SCALE:-1}
ROUNDS=${ROUNDS:-5}
[ -x "$BUILD/otter" ] || {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target otter_cli >/dev/null
}
ls web/dist/*.wasm >/dev/null 2>&1 || tools/build-web.sh >/dev/null
NPM="$BUILD/npm"
ORT_VERSION=1.19.2
[ -f "$NPM/node_modules/onnxruntime-web/package.json" ] &&
  [ "$(node -p "require('$PWD/$NPM/node_modules/onnxruntime-web/package.json').version")" = "$ORT_VERSION" ] ||
  npm install --silent --ignore-scripts --no-audit --no-fund --prefix "$NPM" "onnxruntime-web@$ORT_VERSION" >/dev/null
W="$BUILD/bench/web"
mkdir -p "$W"
"$BUILD/otter" models cifar10-cnn -o "$W/cifar10-cnn.onnx" >/dev/null
rm -rf "$W/cifar10-cnn"
"$BUILD/otter" artifacts "$W/cifar10-cnn.onnx" -o "$W/cifar10-cnn" --loss CrossEntropyLoss --optimizer AdamW \
  --lr-hparams beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01,correct_bias=1,adam_mode=0 >/dev/null

kb() { echo "$(($(stat -c %s "$1") / 1024)) KB"; }
echo "web training throughput, batch 64, 1 thread, one Node $(node --version) process: otter-web vs onnxruntime-web $ORT_VERSION"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
for f in web/dist/*.wasm; do echo "otter .wasm: $f $(kb "$f")"; done
echo "ORT .wasm:   $(kb "$NPM/node_modules/onnxruntime-web/dist/ort-training-wasm-simd-threaded.wasm")"
printf '%-24s %14s %14s %8s %20s\n' model "otter smp/s" "ORT smp/s" ratio "final loss otter/ORT"
for job in "mnist-dnn(FLAT fixture):tests/data/ort-flat-mnist:784:$((40 * SCALE))" \
           "cifar10-cnn:$W/cifar10-cnn:3 32 32:$((4 * SCALE))"; do
  IFS=: read -r label dir dims steps <<<"$job"
  # shellcheck disable=SC2086
  j=$(node bench/web_training.js "$NPM" web "$dir" "$ROUNDS" "$steps" 64 $dims)
  /usr/bin/python3 - "$label" "$j" <<'PY'
import json, sys
label, r = sys.argv[1], json.loads(sys.argv[2])
print(f"{label:<24} {r['otter_samples_per_s']:14.0f} {r['ort_samples_per_s']:14.0f} {r['ratio']:7.2f}x "
      f"{r['otter_loss']:9.4f} / {r['ort_loss']:.4f}   (ms/step {r['otter_median_ms']:.2f} vs {r['ort_median_ms']:.2f})")
PY
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
