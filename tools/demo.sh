#!/usr/bin/env bash
# Demo: build otter, build the seeds' MNIST DNN (784-200-200-10) through the C editing API
# (examples/mnist_dnn.c), then check, print, summarize and render it with the `otter` CLI.
# Assumes the dependencies are installed (tools/setup.sh). Outputs go to out/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${OTTER_DEMO_BUILD:-$root/build-demo}"
out="$root/out"
mkdir -p "$out"

echo "== building otter in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target otter_cli mnist_dnn >/dev/null
otter="$build/otter"

echo "== building the MNIST DNN through the C editing API"
"$build/examples/mnist_dnn" "$out/mnist_dnn.onnx" --seed 42

echo "== otter check (structure, operator schemas, shape inference)"
"$otter" check "$out/mnist_dnn.onnx"

echo "== otter print"
"$otter" print "$out/mnist_dnn.onnx"

echo "== otter info"
"$otter" info "$out/mnist_dnn.onnx"

echo "== otter dot"
"$otter" dot "$out/mnist_dnn.onnx" -o "$out/mnist_dnn.dot"
if command -v dot >/dev/null; then
    "$otter" dot "$out/mnist_dnn.onnx" -o "$out/mnist_dnn.svg"
else
    echo "(graphviz's dot is not installed: wrote only the .dot file)"
fi

echo
echo "outputs:"
echo "  model     $out/mnist_dnn.onnx"
echo "  graphviz  $out/mnist_dnn.dot"
[ -f "$out/mnist_dnn.svg" ] && echo "  picture   $out/mnist_dnn.svg"
echo "  CLI       $otter (try: $otter --help)"
