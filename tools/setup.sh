#!/usr/bin/env bash
# Installs everything otter needs to build, test and run its demo on Debian 12.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake pkg-config clang clang-format libclang-rt-14-dev git \
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev libonnx-testdata \
  libopenblas-dev zlib1g-dev libmicrohttpd-dev libcurl4-openssl-dev \
  libpcre2-dev libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev \
  python3 python3-onnx python3-numpy python3-torch python3-torchvision graphviz dataset-fashion-mnist \
  python3-venv python3-pip python3-setuptools python3-wheel \
  openssl
# Node.js runs ONNX Runtime's web training build and onnxruntime-node, the peers in tests and benchmarks.
command -v node >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q nodejs npm
