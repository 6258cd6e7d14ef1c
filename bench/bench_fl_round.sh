#!/bin/sh
# Server-side cost of one federated round for the CIFAR-10 CNN (otter models cifar10-cnn, 1.15 M parameters)
# from 100 clients on loopback: receive + check + FedAvg + state save, MB/s, and the format's overhead.
#   bench/bench_fl_round.sh BUILD_DIR [CLIENTS [ROUNDS]]
# Not a test.
set -eu
build=${1:?usage: bench_fl_round.sh BUILD_DIR [CLIENTS [ROUNDS]]}
clients=${2:-100}
rounds=${3:-4}
cmake --build "$build" --target bench_fl_round otter_cli >/dev/null
dir=${TMPDIR:-/tmp}/otter_bench_fl
mkdir -p "$dir"
if [ ! -f "$dir/art/checkpoint" ]; then
    "$build/otter" models cifar10-cnn -o "$dir/cifar10_cnn.onnx" >/dev/null
    "$build/otter" artifacts "$dir/cifar10_cnn.onnx" -o "$dir/art" --optimizer SGD >/dev/null
fi
"$build/bench/bench_fl_round" "$dir/art" "$clients" "$rounds"
