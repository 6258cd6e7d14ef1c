#!/usr/bin/python3
"""Write the small .npy reference files tests/test_npy.c reads (into tests/data/npy/).

Run with Debian's python3 (python3-numpy):  /usr/bin/python3 tools/make_npy_fixtures.py
Every array's values follow from its index (value = f(i)), so the C test can recompute them:
  floats:  (i - 3) * 0.25        ints: i - 3 (unsigned: i)        bool: i % 3 == 0
Files:
  <dtype>.npy            shape (2, 3), format 1.0, for each dtype below
  scalar_f8.npy          shape (), 1.5
  empty_f4.npy           shape (0, 4)
  vec_i8.npy             shape (5,)
  rank5_u1.npy           shape (1, 2, 1, 3, 2)
  v2_f4.npy              shape (2, 3) float32 written as format 2.0
  v3_f4.npy              shape (2, 3) float32 written as format 3.0
  bigendian_f4.npy       '>f4' (otter refuses it)
  fortran_f4.npy         fortran_order True, shape (2, 3) (otter refuses it)
  fortran_vec_f4.npy     fortran_order True, shape (4,) (same bytes as C order; otter reads it)
"""
import os
import sys

import numpy as np
from numpy.lib import format as npf

DTYPES = ["f4", "f8", "f2", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"]


def values(dt, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    i = np.arange(n)
    kind = np.dtype(dt).kind
    if kind == "f":
        v = (i - 3) * 0.25
    elif kind == "i":
        v = i - 3
    elif kind == "u":
        v = i
    else:
        v = i % 3 == 0
    return np.asarray(v).astype(dt).reshape(shape)


def save(path, arr, version=None):
    with open(path, "wb") as f:
        npf.write_array(f, arr, version=version, allow_pickle=False)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "npy")
    os.makedirs(out, exist_ok=True)
    for dt in DTYPES:
        np.save(os.path.join(out, dt + ".npy"), values("<" + dt, (2, 3)))
    np.save(os.path.join(out, "scalar_f8.npy"), np.array(1.5, dtype="<f8"))
    np.save(os.path.join(out, "empty_f4.npy"), np.zeros((0, 4), dtype="<f4"))
    np.save(os.path.join(out, "vec_i8.npy"), values("<i8", (5,)))
    np.save(os.path.join(out, "rank5_u1.npy"), values("u1", (1, 2, 1, 3, 2)))
    save(os.path.join(out, "v2_f4.npy"), values("<f4", (2, 3)), (2, 0))
    save(os.path.join(out, "v3_f4.npy"), values("<f4", (2, 3)), (3, 0))
    np.save(os.path.join(out, "bigendian_f4.npy"), values(">f4", (2, 3)))
    np.save(os.path.join(out, "fortran_f4.npy"), np.asfortranarray(values("<f4", (2, 3))))
    save(os.path.join(out, "fortran_vec_f4.npy"), np.asfortranarray(values("<f4", (4,))))
    # np.save writes 1-D arrays as C order; force the header flag for this one.
    path = os.path.join(out, "fortran_vec_f4.npy")
    raw = open(path, "rb").read()
    raw = raw.replace(b"'fortran_order': False", b"'fortran_order': True ", 1)
    open(path, "wb").write(raw)
    assert np.load(path).flags.f_contiguous
    print("wrote", len(os.listdir(out)), "files to", out)


if __name__ == "__main__":
    main()
