"""tests/onnx_backend.py's own decoding and comparison, on values whose answers are known: the element types onnx
1.12's numpy_helper can't read (bfloat16, float8 x4, int4/uint4, float4e2m1, float8e8m0, int2/uint2) from raw_data and
int32_data, assert_allclose's rules (NaN = NaN, infinities exact, atol + rtol |expected|), exact integers and strings,
sequences and optionals element by element. A harness that misreads a type would pass or fail cases wrongly."""
import os
import sys

import numpy as np
from onnx import OptionalProto, SequenceProto, TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_backend as ob  # noqa: E402
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402


def tensor(dt, dims, raw=None, int32=None):
    t = TensorProto(data_type=dt, dims=dims)
    if raw is not None:
        t.raw_data = bytes(raw)
    if int32 is not None:
        t.int32_data.extend(int32)
    return t


def same(a, b):
    return np.array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64), equal_nan=True)


def main():
    # float8: codes with known values (ONNX's spec tables), raw and int32_data
    cases = {
        ob.F8E4M3FN: ([0x00, 0x01, 0x38, 0x7E, 0x7F, 0xFE, 0x80], [0, 2.0 ** -9, 1.0, 448, np.nan, -448, -0.0]),
        ob.F8E4M3FNUZ: ([0x00, 0x01, 0x40, 0x7F, 0x80, 0xFF], [0, 2.0 ** -10, 1.0, 240, np.nan, -240]),
        ob.F8E5M2: ([0x00, 0x01, 0x3C, 0x7B, 0x7C, 0x7D, 0xFC], [0, 2.0 ** -16, 1.0, 57344, np.inf, np.nan, -np.inf]),
        ob.F8E5M2FNUZ: ([0x00, 0x01, 0x40, 0x7F, 0x80], [0, 2.0 ** -17, 1.0, 57344, np.nan]),
        ob.F8E8M0: ([0, 127, 128, 254, 255], [2.0 ** -127, 1.0, 2.0, 2.0 ** 127, np.nan]),
    }
    for dt, (codes, want) in cases.items():
        for how in ("raw", "int32"):
            t = tensor(dt, [len(codes)], raw=codes if how == "raw" else None, int32=codes if how == "int32" else None)
            _, shape, got = ob.decode_tensor(t)
            check(shape == (len(codes),) and same(got, want),
                  f"{ob.TYPE_NAMES[dt]} from {how}: {got.tolist()} == {want}")

    # 4-bit and 2-bit: low bits first, odd counts, sign extension; int32_data holds one packed byte each
    t = tensor(ob.INT4, [3], raw=[0x7F, 0x08])
    check(ob.decode_tensor(t)[2].tolist() == [-1, 7, -8], "int4 [0x7F, 0x08] -> [-1, 7, -8] (low nibble first)")
    t = tensor(ob.UINT4, [2, 2], int32=[0x21, 0xF3])
    check(ob.decode_tensor(t)[2].tolist() == [[1, 2], [3, 15]], "uint4 from int32_data, 2x2")
    t = tensor(ob.FLOAT4E2M1, [4], raw=[0x71, 0xF9])
    check(same(ob.decode_tensor(t)[2], [0.5, 6.0, -0.5, -6.0]), "float4e2m1 [0x71, 0xF9] -> [0.5, 6, -0.5, -6]")
    t = tensor(ob.INT2, [5], raw=[0b11100100, 0b10])
    check(ob.decode_tensor(t)[2].tolist() == [0, 1, -2, -1, -2], "int2: four per byte, sign-extended")
    t = tensor(ob.UINT2, [4], int32=[0b11100100])
    check(ob.decode_tensor(t)[2].tolist() == [0, 1, 2, 3], "uint2 from int32_data")

    # bfloat16 raw and as int32_data bits; float16 in int32_data
    bits = [0x3FC0, 0xC000, 0x7F80]
    for how in ("raw", "int32"):
        raw = np.array(bits, "<u2").tobytes() if how == "raw" else None
        t = tensor(ob.BFLOAT16, [3], raw=raw, int32=bits if how == "int32" else None)
        check(same(ob.decode_tensor(t)[2], [1.5, -2.0, np.inf]), f"bfloat16 from {how}")
    t = tensor(ob.FLOAT16, [2], int32=[0x3C00, 0xC400])
    check(same(ob.decode_tensor(t)[2], [1.0, -4.0]), "float16 bits in int32_data")
    t = tensor(ob.INT4, [3], raw=[0x7F])
    try:
        ob.decode_tensor(t)
        check(False, "int4 with too few bytes for its dims is refused")
    except ValueError as e:
        check(True, f"int4 with too few bytes for its dims is refused: {e}")

    # comparison rules
    def cmp(got, exp, dt=ob.FLOAT, rtol=1e-3, atol=1e-7):
        g, e = np.asarray(got), np.asarray(exp)
        return ob.compare(("tensor", (dt, g.shape, g)), ("tensor", (dt, e.shape, e)), rtol, atol)

    check(cmp([1.0, np.nan, np.inf], [1.0005, np.nan, np.inf]) is None, "NaN = NaN, inf = inf, |d| <= rtol |e|")
    check(cmp([1.0], [1.0011]) is not None, "1.0 vs 1.0011 differs at rtol 1e-3")
    check(cmp([np.inf], [-np.inf]) is not None and cmp([np.nan], [0.0]) is not None, "inf signs and NaN vs 0")
    check(cmp([0.0], [5e-8]) is None and cmp([0.0], [2e-7]) is not None, "atol 1e-7 around 0")
    check(cmp([1000], [1001], ob.INT64) is not None, "integers exactly (1000 vs 1001)")
    check(cmp([[1.0, 2.0]], [1.0, 2.0]) is not None, "shape [1, 2] vs [2] differs")
    check(ob.compare(("tensor", (ob.FLOAT, (1,), np.ones(1))), ("tensor", (ob.DOUBLE, (1,), np.ones(1))), 1e-3, 1e-7)
          is not None, "element type float vs double differs")
    check(cmp(np.array([b"a", b"b"], object), np.array([b"a", b"c"], object), ob.STRING) is not None,
          "strings exactly")

    # sequences and optionals through their protos
    seq = numpy_helper.from_list([np.ones(2, np.float32), np.zeros(3, np.float32)])
    seq2 = numpy_helper.from_list([np.ones(2, np.float32)])
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    check(ob.message_class(seq_type) is SequenceProto and ob.message_class(opt_type) is OptionalProto,
          "the declared type picks SequenceProto / OptionalProto")
    a, b = ob.decode_message(seq), ob.decode_message(seq2)
    check(ob.compare(a, a, 1e-3, 1e-7) is None and "sequence of 1, expected 2" in (ob.compare(b, a, 1e-3, 1e-7) or ""),
          "sequences: equal to itself, length checked")
    empty = ob.decode_message(numpy_helper.from_optional(None))
    full = ob.decode_message(numpy_helper.from_optional(np.ones(2, np.float32)))
    check(empty == ("optional", None) and ob.compare(full, empty, 1e-3, 1e-7) is not None,
          "optionals: empty decodes as no value, differs from one with a value")
    return tl.finish("test_onnx_backend")


if __name__ == "__main__":
    sys.exit(main())
