#!/usr/bin/env bash
# Training peak RSS, otter against PyTorch, on tools/export_torch_models.py's real architectures (REAL_MODELS).
#   bench/train_memory.sh [BUILD_DIR] [MODEL ...]     (default build/release; built if missing; default every model)
# Each model: exported at opset 17 in training mode (IMAGE_SIZE x IMAGE_SIZE images, default 64; 32 tokens), otter
# artifacts with CrossEntropyLoss and AdamW, then STEPS (default 2) training steps at batch BATCH (default 32) on
# random data, once by `otter train --data npy:` (THREADS threads, default 2) and once by PyTorch's own loop
# (zero_grad, forward, CrossEntropyLoss, backward, torch.optim.AdamW step; torch.set_num_threads(THREADS)), each its
# own process under /usr/bin/time -v. Prints both "Maximum resident set size" values and otter/PyTorch (< 1: otter
# smaller). PyTorch's figure includes the interpreter and torch's libraries (the baseline row: import torch and
# build the model, no step). A model otter cannot train yet shows otter's error instead. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
shift || true
BATCH=${BATCH:-32}
STEPS=${STEPS:-2}
THREADS=${THREADS:-2}
IMAGE_SIZE=${IMAGE_SIZE:-64}
PY=/usr/bin/python3
[ -x "$BUILD/otter" ] || {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" --target otter_cli >/dev/null
}
W="$BUILD/bench/train_memory"
mkdir -p "$W"
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || read -r -a MODELS <<<"$($PY -c 'import sys; sys.path.insert(0, "tools")
import export_torch_models as e; print(" ".join(e.REAL_MODELS))')"
HP=beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01,correct_bias=1,adam_mode=0

peak_kb() { # command...: runs it under /usr/bin/time -v; prints its peak RSS in KiB, or its error
  local log
  log=$(mktemp)
  if /usr/bin/time -v "$@" >"$log" 2>&1; then
    sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$log"
  else
    grep -E '^(otter [a-z]+|[A-Za-z]*Error):' "$log" | tail -1 # the CLI's error, or Python's
  fi
  rm -f "$log"
}

# PyTorch's training loop (argv: model steps batch threads image_size data_dir; steps 0: build the model only)
TORCH_TRAIN=$(
  cat <<'PY'
import sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, torch
sys.path.insert(0, "tools")
import export_torch_models as e
name, steps, batch, threads, size, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
torch.set_num_threads(threads)
model = e.build_real_model(name).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8, weight_decay=0.01)
ce = torch.nn.CrossEntropyLoss()
x, y = torch.from_numpy(np.load(f"{d}/x.npy")), torch.from_numpy(np.load(f"{d}/y.npy"))
for s in range(steps):
    opt.zero_grad()
    ce(model(x[s * batch:(s + 1) * batch]), y[s * batch:(s + 1) * batch]).backward()
    opt.step()
PY
)

echo "training peak RSS, batch $BATCH, $STEPS AdamW steps, $THREADS threads, images ${IMAGE_SIZE}x$IMAGE_SIZE;" \
  "$("$BUILD/otter" --version | head -1) vs PyTorch $($PY -c 'import torch; print(torch.__version__)')"
printf '%-20s %10s %10s %8s %14s\n' model "otter MB" "torch MB" "ratio" "torch base MB"
for m in "${MODELS[@]}"; do
  d="$W/$m"
  rm -rf "$d"
  mkdir -p "$d"
  $PY - "$m" "$d" "$((BATCH * STEPS))" "$IMAGE_SIZE" <<'PY' 2>/dev/null
import sys, warnings
warnings.filterwarnings("ignore")
import numpy as np
sys.path.insert(0, "tools")
import export_torch_models as e
name, d, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
e.export_real(name, f"{d}/{name}.onnx", size)
rng = np.random.default_rng(0)
np.save(f"{d}/x.npy", e.real_input(name, n, rng, size))
np.save(f"{d}/y.npy", rng.integers(0, e.REAL_CLASSES, n).astype(np.int64))
PY
  if err=$("$BUILD/otter" artifacts "$d/$m.onnx" -o "$d/art" --loss CrossEntropyLoss --optimizer AdamW \
    --lr-hparams "$HP" 2>&1 >/dev/null); then
    otter=$(peak_kb "$BUILD/otter" train "$d/art" --data "npy:$d/x.npy,$d/y.npy" --steps "$STEPS" \
      --batch-size "$BATCH" --no-shuffle --normalize none --threads "$THREADS" --save "$d/ckpt")
  else
    otter=$err
  fi
  torch=$(peak_kb $PY -c "$TORCH_TRAIN" "$m" "$STEPS" "$BATCH" "$THREADS" "$IMAGE_SIZE" "$d")
  base=$(peak_kb $PY -c "$TORCH_TRAIN" "$m" 0 "$BATCH" "$THREADS" "$IMAGE_SIZE" "$d")
  if [[ $otter =~ ^[0-9]+$ && $torch =~ ^[0-9]+$ ]]; then
    printf '%-20s %10.1f %10.1f %7.2fx %14.1f\n' "$m" "$(echo "$otter / 1024" | bc -l)" \
      "$(echo "$torch / 1024" | bc -l)" "$(echo "$otter / $torch" | bc -l)" "$(echo "$base / 1024" | bc -l)"
  else
    printf '%-20s %10s %10s   otter: %s\n' "$m" - "$([[ $torch =~ ^[0-9]+$ ]] && echo "$((torch / 1024))" || echo -)" \
      "$otter"
  fi
done
