#!/bin/sh
# Load benchmark: a >= 100 MB ONNX model (a small MLP with big float initializers, built with
# python3-onnx), loaded by otter_model_load and by python3-onnx's onnx.load, best of 3 each.
#   bench/bench_load.sh BUILD_DIR [MODEL_MB]
# Prints both throughputs and the ratio otter / onnx (> 1: otter is faster). Not a test.
set -eu
build=${1:?usage: bench_load.sh BUILD_DIR [MODEL_MB]}
mb=${2:-128}
py=/usr/bin/python3
model=${TMPDIR:-/tmp}/otter_bench_load_${mb}mb.onnx
cmake --build "$build" --target bench_load >/dev/null

if [ ! -f "$model" ]; then
    "$py" - "$model" "$mb" <<'PY'
import sys
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

path, mb = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
# Four Gemm layers whose weights add up to ~mb MB of float32, plus biases.
width = int((mb * 1e6 / 4 / 4) ** 0.5)
inits, nodes, prev = [], [], "x"
for i in range(4):
    w = rng.standard_normal((width, width), dtype=np.float32)
    b = rng.standard_normal((width,), dtype=np.float32)
    inits += [numpy_helper.from_array(w, "w%d" % i), numpy_helper.from_array(b, "b%d" % i)]
    nodes.append(helper.make_node("Gemm", [prev, "w%d" % i, "b%d" % i], ["h%d" % i]))
    prev = "h%d" % i
g = helper.make_graph(nodes, "bench_load",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                      [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", width])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.save(m, path)
PY
fi
size=$(stat -c %s "$model")
echo "model: $model ($size bytes)"
# Read it once so both loaders see a warm page cache.
cat "$model" >/dev/null

otter_line=$("$build/bench/bench_load" "$model" 3)
echo "$otter_line"
onnx_line=$("$py" - "$model" <<'PY'
import sys, time, os
import onnx
path = sys.argv[1]
best = 1e30
for _ in range(3):
    t0 = time.perf_counter()
    m = onnx.load(path)
    dt = time.perf_counter() - t0
    del m
    best = min(best, dt)
size = os.path.getsize(path)
print("onnx.load (python3-onnx %s): %d bytes, best %.4f s, %.1f MB/s" % (onnx.__version__, size, best, size / best / 1e6))
PY
)
echo "$onnx_line"
otter_mbs=$(echo "$otter_line" | sed -n 's/.*s, \([0-9.]*\) MB\/s.*/\1/p')
onnx_mbs=$(echo "$onnx_line" | sed -n 's/.*s, \([0-9.]*\) MB\/s.*/\1/p')
"$py" -c "import sys; o, p = float(sys.argv[1]), float(sys.argv[2]); print('ratio otter/onnx.load: %.2fx (%s)' % (o / p, 'otter faster' if o >= p else 'otter SLOWER'))" "$otter_mbs" "$onnx_mbs"
