#!/bin/sh
# Build libotter for WebAssembly with Debian's emscripten: web/dist/otter.wasm and its loader otter.js
# (MODULARIZE: createOtterModule), then web/dist/otter.cjs and otter.mjs, the package's two entries
# (web/build-entries.js wraps web/src/api.js).
# OTTER_WEB_PROFILING=ON keeps function names in the .wasm for profilers (node --cpu-prof).
# Needs: emscripten node-acorn binaryen protobuf-c-compiler cmake (tools/setup.sh installs them).
# protobuf-c has no wasm build in Debian: its source tarball (Debian's own, sha256 pinned) is downloaded
# once into build/web-deps/ and compiled with emcc.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${OTTER_WEB_BUILD:-$ROOT/build/web}
DEPS=$ROOT/build/web-deps
PBC_VERSION=1.4.1
PBC_TARBALL=protobuf-c_$PBC_VERSION.orig.tar.gz
PBC_URL=http://deb.debian.org/debian/pool/main/p/protobuf-c/$PBC_TARBALL
PBC_SHA256=4cc4facd508172f3e0a4d3a8736225d472418aee35b4ad053384b137b220339f

for tool in emcc emcmake wasm-opt protoc-c cmake node; do
    command -v $tool >/dev/null || { echo "build-web.sh: $tool not found (tools/setup.sh installs it)" >&2; exit 1; }
done
# Debian's emcc runs its JS optimizer under node with acorn from node-acorn.
export NODE_PATH=${NODE_PATH:-/usr/share/nodejs}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT} CCACHE_DIR=${CCACHE_DIR:-$HOME/.ccache}
LAUNCHER=
command -v ccache >/dev/null && LAUNCHER=-DCMAKE_C_COMPILER_LAUNCHER=ccache

mkdir -p "$DEPS"
if [ ! -f "$DEPS/$PBC_TARBALL" ]; then
    echo "downloading $PBC_URL"
    curl -sSfL -o "$DEPS/$PBC_TARBALL.part" "$PBC_URL"
    mv "$DEPS/$PBC_TARBALL.part" "$DEPS/$PBC_TARBALL"
fi
echo "$PBC_SHA256  $DEPS/$PBC_TARBALL" | sha256sum -c --quiet - ||
    { echo "build-web.sh: $DEPS/$PBC_TARBALL: sha256 mismatch (delete it to download again)" >&2; exit 1; }
PBC_SRC=$DEPS/protobuf-c-$PBC_VERSION
[ -f "$PBC_SRC/protobuf-c/protobuf-c.c" ] || tar -xzf "$DEPS/$PBC_TARBALL" -C "$DEPS"

emcmake cmake -S "$ROOT/cmake/web" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOTTER_WERROR=ON $LAUNCHER \
    -DOTTER_WEB_PROFILING="${OTTER_WEB_PROFILING:-OFF}" -DPROTOBUF_C_SRC="$PBC_SRC" -DOTTER_WEB_OUT="$ROOT/web/dist" -DCMAKE_C_FLAGS="-msimd128 -fno-unroll-loops" >/dev/null
nice -n 19 cmake --build "$BUILD" -j"${OTTER_WEB_JOBS:-2}"
node "$ROOT/web/build-entries.js" "$ROOT/web"
echo "web/dist/otter.wasm: $(wc -c <"$ROOT/web/dist/otter.wasm") bytes"
