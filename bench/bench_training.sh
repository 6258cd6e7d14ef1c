#!/usr/bin/env bash
# Training throughput, otter against PyTorch (python3-torch) and ONNX Runtime's web training build
# (onnxruntime-web 1.19.2 under Node, installed with --ignore-scripts into the build tree), side by side in one run.
#   bench/bench_training.sh [BUILD_DIR]     (default build/release; built if missing)
# Models: the MNIST DNN (784-200-200-10) and the CIFAR-10 CNN (Conv 3-32-64-128 + Linear 2048-512-10), batch 64,
# CrossEntropyLoss, AdamW (otter's artifacts with torch.optim.AdamW's hyperparameters, adam_mode 0), synthetic
# data of the same shapes (no loader I/O). One step = forward + backward + optimizer step (+ gradient reset).
# otter and PyTorch at 1 and 2 threads; ORT at 1 thread (its numThreads = 1 under Node) on the ORT-made fixture
# tests/data/ort-flat-mnist and on otter's CIFAR-10 artifacts. Each measurement is its own process, so the peak
# RSS (getrusage / process.resourceUsage) is that runtime's alone. samples/s from the median step time.
# Prints otter/peer throughput ratios (> 1: otter faster) and peak RSS. Not a test.
#   STEPS_SCALE=2 doubles the timed steps. otter and PyTorch alternate ROUNDS times (default 3) per row, since
# the VM's speed drifts by 10-25% within minutes; a row shows the medians over the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
SCALE=${STEPS_SCALE:-1}
ROUNDS=${ROUNDS:-3}
[ -x "$BUILD/bench/bench_training" ] && [ -x "$BUILD/otter" ] || {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$BUILD" -j"$(nproc)" --target bench_training otter_cli >/dev/null
}
NPM="$BUILD/npm"
ORT_VERSION=1.19.2
[ -f "$NPM/node_modules/onnxruntime-web/package.json" ] &&
  [ "$(node -p "require('$PWD/$NPM/node_modules/onnxruntime-web/package.json').version")" = "$ORT_VERSION" ] ||
  npm install --silent --ignore-scripts --no-audit --no-fund --prefix "$NPM" "onnxruntime-web@$ORT_VERSION" >/dev/null
W="$BUILD/bench/training"
mkdir -p "$W"
HP=beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01,correct_bias=1,adam_mode=0
for m in mnist-dnn cifar10-cnn; do
  "$BUILD/otter" models "$m" -o "$W/$m.onnx" >/dev/null
  rm -rf "$W/$m"
  "$BUILD/otter" artifacts "$W/$m.onnx" -o "$W/$m" --loss CrossEntropyLoss --optimizer AdamW --lr-hparams "$HP" >/dev/null
done

row() { # label threads otter-jsons peer-jsons peer-name (one JSON line per round)
  /usr/bin/python3 - "$@" <<'PY'
import json, statistics, sys
label, threads, o, p, peer = sys.argv[1:]
def rounds(text):
    runs = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {"samples_per_s": statistics.median(r["samples_per_s"] for r in runs),
            "median_ms": statistics.median(r["median_ms"] for r in runs),
            "peak_rss_kb": max(r["peak_rss_kb"] for r in runs)}
o, p = rounds(o), rounds(p)
print(f"{label:<22} {threads:>7} {o['samples_per_s']:12.0f} {p['samples_per_s']:12.0f} {peer:<9} "
      f"{o['samples_per_s'] / p['samples_per_s']:7.2f}x {o['peak_rss_kb'] / 1024:10.1f} {p['peak_rss_kb'] / 1024:10.1f} "
      f"{p['peak_rss_kb'] / o['peak_rss_kb']:7.1f}x   (ms/step {o['median_ms']:.2f} vs {p['median_ms']:.2f})")
PY
}

TORCH_VERSION=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
echo "training throughput, batch 64, AdamW; otter vs PyTorch $TORCH_VERSION and onnxruntime-web $ORT_VERSION (Node $(node --version))"
echo "ratio = otter samples/s / peer samples/s (> 1: otter faster); RSS ratio = peer peak RSS / otter peak RSS (> 1: otter smaller)"
# One-thread rows run both sides on one CPU (CPU=N, default the last this process may use): the VM's two
# CPUs can differ by 2x on memory-bound work, and which one is slow changes over the day.
CPU=${CPU:-$(/usr/bin/python3 -c 'import os; print(max(os.sched_getaffinity(0)))')}
pin() { if [ "$1" = 1 ]; then echo taskset -c "$CPU"; fi; }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; one-thread rows run both sides on CPU $CPU"
printf '%-22s %7s %12s %12s %-9s %8s %10s %10s %8s\n' model threads "otter smp/s" "peer smp/s" peer ratio \
  "otter MB" "peer MB" "RSS x"
for m in mnist-dnn cifar10-cnn; do
  if [ "$m" = mnist-dnn ]; then tm=mnist_dnn; dims="784"; steps=$((200 * SCALE)); else tm=cifar_cnn; dims="3 32 32"; steps=$((20 * SCALE)); fi
  for t in 1 2; do
    o="" p=""
    for _ in $(seq "$ROUNDS"); do # alternate the two: the VM's speed drifts
      # shellcheck disable=SC2086,SC2046
      o+=$($(pin "$t") "$BUILD/bench/bench_training" "$W/$m" "$t" "$steps" 64 $dims)$'\n'
      # shellcheck disable=SC2046
      p+=$($(pin "$t") /usr/bin/python3 bench/torch_train.py "$tm" "$t" "$steps" 64)$'\n'
    done
    row "$m" "$t" "$o" "$p" pytorch
  done
done
# ONNX Runtime's web training build, single-threaded: the ORT-made fixture and otter's CIFAR-10 artifacts.
# These rows run unpinned: Node uses a second CPU for work besides ORT's compute thread (pinned, its MNIST
# step went from ~4 to 18 ms), so a pin would measure Node starved, not ORT's kernels.
for job in "ort-fixture(mnist-dnn):tests/data/ort-flat-mnist:784:$((100 * SCALE))" \
           "cifar10-cnn:$W/cifar10-cnn:3 32 32:$((10 * SCALE))"; do
  IFS=: read -r label dir dims steps <<<"$job"
  # shellcheck disable=SC2086
  o=$("$BUILD/bench/bench_training" "$dir" 1 "$steps" 64 $dims)
  # shellcheck disable=SC2086
  if p=$(node bench/ort_train.js "$NPM" "$dir" "$steps" 64 $dims 2>/dev/null); then
    row "$label" 1 "$o" "$p" ort-web
  else
    printf '%-22s %7s  ONNX Runtime web training failed on %s\n' "$label" 1 "$dir"
  fi
done
