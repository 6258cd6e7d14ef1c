#!/usr/bin/env python3
"""Checks that otter's layers depend only downwards (docs: ../shared/ENGINEERING.md, "The shape of the system").

Usage: check_layers.py SRC_DIR OBJECTS_LIST

A layer is a folder under src/. Two kinds of dependency are read:
  - includes: every #include "..." in src/<layer>/ (resolved next to the file first, then under src/);
    public headers (include/otter/*.h) are the API and free for every layer to include;
  - internal symbols: every undefined symbol of a library object (OBJECTS_LIST: one .o path a line)
    that another layer's object defines, except public otter_* functions.
Rules:
  1. no layer depends on a higher one (LAYERS below): nothing in src/core or src/ir includes from
     format/, nothing in src/runtime refers to autodiff's internals, ...;
  2. no cycle between layers, including layers of the same rank;
  3. src/cli includes only public headers and its own (it is a user of the library like any other)."""
import collections
import os
import re
import subprocess
import sys

# Rank of each folder under src/: a layer may depend on layers of lower rank (and on same-rank layers
# as long as no cycle forms).
LAYERS = {
    "core": 0,
    "ir": 1,
    "format": 2,
    "check": 2,
    "infer": 2,
    "data": 3,
    "runtime": 3,
    "autodiff": 4,
    "training": 4,
    "fl": 5,
    "cli": 6,
    "web": 6,  # the WebAssembly module's glue over the public API (built by tools/build-web.sh only)
}
# Files that sit in another layer than their folder's.
FILE_LAYERS = {
    # An operator registry's table binds kernels, shape rules and gradient rules, so it sits above them all,
    # while the rest of src/ops (the row type and the lookup) sits beside check's schemas for them to use.
    "ops/table.c": "ops_table",
}
LAYERS.update({"ops": 2, "ops_table": 5})
# Internal symbols a lower layer may name although a higher one defines them: tables declared low and
# filled in high (the one inversion the registry needs), each with its reason.
UPWARD_SYMBOLS = {
    "ot_op_table": "declared in ops/registry.h, defined by ops/table.c",
    "ot_op_table_count": "declared in ops/registry.h, defined by ops/table.c",
}
# Generated headers and the layer that owns them.
GENERATED = {"onnx.pb-c.h": "format", "onnx-data.pb-c.h": "format"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_rel(rel):
    """Layer of a path relative to src/ ("runtime/ops/nn.c", or an object's "runtime/ops/nn.c.o")."""
    rel = rel[:-2] if rel.endswith(".o") else rel
    parts = rel.split(os.sep)
    return FILE_LAYERS.get("/".join(parts), parts[0] if len(parts) > 1 else None)


def layer_of_path(src_dir, path):
    return layer_of_rel(os.path.relpath(path, src_dir))


def include_edges(src_dir, problems):
    """(from_layer, to_layer) -> ["file: include", ...]"""
    edges = collections.defaultdict(list)
    for root, _, files in os.walk(src_dir):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(root, f)
            src_layer = layer_of_path(src_dir, path)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            for inc in INCLUDE_RE.findall(text):
                where = f"{os.path.relpath(path, src_dir)}: #include \"{inc}\""
                if inc.startswith("otter/"):
                    continue
                if os.path.exists(os.path.join(root, inc)):
                    dst_layer = layer_of_path(src_dir, os.path.normpath(os.path.join(root, inc)))
                elif os.path.exists(os.path.join(src_dir, inc)):
                    dst_layer = layer_of_path(src_dir, os.path.join(src_dir, inc))
                elif inc in GENERATED:
                    dst_layer = GENERATED[inc]
                else:
                    problems.append(f"{where}: not found under src/ (add it to GENERATED if it is generated)")
                    continue
                if src_layer == "cli" and dst_layer == "cli":
                    continue
                if src_layer == "cli":
                    problems.append(f"{where}: the CLI includes only public headers and its own")
                    continue
                if dst_layer != src_layer:
                    edges[(src_layer, dst_layer)].append(where)
    return edges


def symbol_edges(src_dir, objects):
    """(from_layer, to_layer) -> ["object: symbol", ...] for internal (non-otter_) symbols."""
    defined, undefined = {}, collections.defaultdict(set)
    for obj in objects:
        layer = layer_of_rel(obj.split(os.sep + "src" + os.sep, 1)[1])
        out = subprocess.run(["nm", obj], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in "TDRBCVW":
                defined[fields[2]] = layer
            elif len(fields) == 2 and fields[0] == "U":
                undefined[(obj, layer)].add(fields[1])
    edges = collections.defaultdict(list)
    for (obj, layer), syms in undefined.items():
        for sym in sorted(syms):
            dst = defined.get(sym)
            if dst and dst != layer and not sym.startswith("otter_") and sym not in UPWARD_SYMBOLS:
                edges[(layer, dst)].append(f"{os.path.basename(obj)}: {sym}")
    return edges, len(defined)


def find_cycle(graph):
    state = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, stack + [nxt])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [node])
            if cycle:
                return cycle
    return None


def main():
    src_dir, objects_list = sys.argv[1:3]
    with open(objects_list) as f:
        objects = [line.strip() for line in f if line.strip()]
    problems = []
    inc = include_edges(src_dir, problems)
    sym, n_defined = symbol_edges(src_dir, objects)
    if not objects or n_defined == 0:
        problems.append(f"{objects_list}: no library objects with symbols to check")

    graph = collections.defaultdict(set)
    for kind, edges in (("includes a header of", inc), ("uses an internal symbol of", sym)):
        for (a, b), where in sorted(edges.items()):
            for layer in (a, b):
                if layer not in LAYERS:
                    problems.append(f"src/{layer}/ has no rank in {os.path.basename(__file__)}'s LAYERS")
            graph[a].add(b)
            if a in LAYERS and b in LAYERS and LAYERS[b] > LAYERS[a]:
                shown = "; ".join(where[:3]) + (f"; ... ({len(where)} in all)" if len(where) > 3 else "")
                problems.append(f"{a} (rank {LAYERS[a]}) {kind} {b} (rank {LAYERS[b]}): {shown}")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("cycle between layers: " + " -> ".join(cycle))

    n_edges = sum(len(v) for v in graph.values())
    print(f"{len(objects)} objects, {n_defined} defined symbols; {n_edges} layer-to-layer dependencies:")
    for a in sorted(graph, key=lambda x: LAYERS.get(x, 99)):
        print(f"    {a} -> {', '.join(sorted(graph[a], key=lambda x: LAYERS.get(x, 99)))}")
    for p in problems:
        print("FAIL:", p)
    print(f"{len(problems)} layering problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
