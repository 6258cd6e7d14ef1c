#!/usr/bin/python3
"""Reference side of tests/test_tensor_pb.c and tests/test_roundtrip.c (run with Debian's python3-onnx).

  pb_reference.py tensors-to-npy CORPUS OUTDIR MANIFEST
      For every input_*.pb / output_*.pb under CORPUS, find the declared type in the folder's model.onnx.
      Writes MANIFEST lines "kind<TAB>pb path<TAB>npy path<TAB>dtype":
        tensor   a TensorProto numpy can hold; numpy_helper.to_array(...) saved as the .npy
        nonpy    a TensorProto numpy's .npy cannot hold (string, bfloat16): npy path is "-"
        other    not a TensorProto (sequence, optional, map): otter does not read these as tensors
  pb_reference.py compare-tensors LIST
  pb_reference.py compare-models LIST
      LIST has lines "original<TAB>copy"; each pair must decode to equal protos (unknown fields included).
      Prints every pair that differs, with the first differing field, and exits 1 if any does.
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def declared_types(model_path):
    m = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    ins = [v for v in m.graph.input if v.name not in inits]
    return ins, list(m.graph.output)


def tensors_to_npy(corpus, outdir, manifest):
    os.makedirs(outdir, exist_ok=True)
    counts = {"tensor": 0, "nonpy": 0, "other": 0}
    lines = []
    for root, _dirs, files in sorted(os.walk(corpus)):
        pbs = sorted(f for f in files if f.endswith(".pb"))
        if not pbs:
            continue
        model = os.path.join(os.path.dirname(root), "model.onnx")
        ins, outs = declared_types(model)
        for f in pbs:
            path = os.path.join(root, f)
            kind_, idx = f[:-3].rsplit("_", 1)
            vals = ins if kind_ == "input" else outs
            idx = int(idx)
            vt = vals[idx].type if idx < len(vals) else None
            if vt is None or vt.WhichOneof("value") != "tensor_type":
                lines.append("other\t%s\t-\t-" % path)
                counts["other"] += 1
                continue
            t = onnx.TensorProto()
            with open(path, "rb") as fh:
                t.ParseFromString(fh.read())
            dt = onnx.TensorProto.DataType.Name(t.data_type)
            if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.BFLOAT16):
                lines.append("nonpy\t%s\t-\t%s" % (path, dt))
                counts["nonpy"] += 1
                continue
            arr = numpy_helper.to_array(t).copy(order="C")  # (ascontiguousarray would make 0-d 1-d)
            rel = os.path.relpath(path, corpus).replace("/", "__")[:-3] + ".npy"
            out = os.path.join(outdir, rel)
            np.save(out, arr)
            lines.append("tensor\t%s\t%s\t%s" % (path, out, dt))
            counts["tensor"] += 1
    with open(manifest, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("pb_reference: %d tensors as .npy, %d tensors numpy cannot hold, %d non-tensor files" %
          (counts["tensor"], counts["nonpy"], counts["other"]))


def first_difference(a, b, prefix=""):
    """Name the first field where two messages differ."""
    fa = dict((f.name, v) for f, v in a.ListFields())
    fb = dict((f.name, v) for f, v in b.ListFields())
    for name in sorted(set(fa) | set(fb)):
        va, vb = fa.get(name), fb.get(name)
        if va is None or vb is None:
            return "%s%s present only in %s" % (prefix, name, "original" if vb is None else "copy")
        if va == vb:
            continue
        if hasattr(va, "ListFields"):
            return first_difference(va, vb, prefix + name + ".")
        if hasattr(va, "__len__") and not isinstance(va, (bytes, str)):
            if len(va) != len(vb):
                return "%s%s: %d vs %d entries" % (prefix, name, len(va), len(vb))
            for i, (x, y) in enumerate(zip(va, vb)):
                if x != y:
                    if hasattr(x, "ListFields"):
                        return first_difference(x, y, "%s%s[%d]." % (prefix, name, i))
                    return "%s%s[%d]: %r vs %r" % (prefix, name, i, x, y)
        return "%s%s: %r vs %r" % (prefix, name, str(va)[:80], str(vb)[:80])
    return prefix + "(unknown fields or field encoding)"


def compare(listfile, cls):
    pairs = [l.rstrip("\n").split("\t") for l in open(listfile) if l.strip()]
    bad = 0
    for a, b in pairs:
        ma, mb = cls(), cls()
        with open(a, "rb") as fh:
            ma.ParseFromString(fh.read())
        with open(b, "rb") as fh:
            mb.ParseFromString(fh.read())
        # Equal canonical encodings, not ==: a NaN in a float field is never == itself (ONNX 1.23's
        # TreeEnsemble set-membership model holds one), while its bits round-trip exactly.
        if ma.SerializeToString(deterministic=True) != mb.SerializeToString(deterministic=True):
            bad += 1
            print("DIFFERS: %s: %s" % (a, first_difference(ma, mb)))
    print("pb_reference: %d of %d pairs decode to equal %s" % (len(pairs) - bad, len(pairs), cls.__name__))
    return 1 if bad else 0


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "tensors-to-npy":
        tensors_to_npy(sys.argv[2], sys.argv[3], sys.argv[4])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "compare-tensors":
        return compare(sys.argv[2], onnx.TensorProto)
    if len(sys.argv) == 3 and sys.argv[1] == "compare-models":
        return compare(sys.argv[2], onnx.ModelProto)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
