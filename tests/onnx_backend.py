#!/usr/bin/python3
"""ONNX backend conformance through the otter CLI, as a user runs it.

For each case folder (model.onnx + test_data_set_*/input_<i>.pb, output_<i>.pb) and each data set:
    otter run -q -t 1 --pb -o TMP model.onnx NAME_0=input_0.pb NAME_1=input_1.pb ...
where input_<i>.pb binds to model.graph.input[i] by name, as ONNX's own runner binds its list of inputs
positionally to graph.input (inputs backed by initializers included, when the case gives a file for each; a case
with fewer files than graph inputs binds them to the inputs that have no initializer). Then every TMP/output_<i>.pb
is compared with the case's output_<i>.pb. Each .pb is decoded as the message its graph input/output declares:
TensorProto, SequenceProto, OptionalProto or MapProto (python3-onnx 1.12's protobuf classes; tensor values are
decoded here, since onnx 1.12's numpy_helper lacks bfloat16's uint16 form, the float8, 4-bit and 2-bit types).

Comparison, as ONNX's runner (onnx/backend/test/runner/__init__.py, assert_similar_outputs): element type and shape
exactly; floating point values with |got - expected| <= atol + rtol * |expected| (np.testing.assert_allclose:
NaN matches NaN, infinities match exactly; default rtol 1e-3, atol 1e-7); strings and bools exactly; integers exactly
(stricter than assert_allclose, which would let 1000 pass for 1001: an integer that differs is a bug, not rounding);
sequences, optionals and maps element by element (kinds, lengths and keys exactly).

Suites:
  --suite 1.12  Debian's libonnx-testdata (ONNX 1.12): /usr/share/libonnx-testdata/data/{node, pytorch-converted,
                pytorch-operator, simple}.
  --suite 1.23  ONNX 1.23's backend data: $OTTER_ONNX_1_23 when set, else <repo>/../shared/onnx-1.23, else
                /work/shared/onnx-1.23; backend/{node, pytorch-converted, pytorch-operator, simple, light}. Absent:
                exit 77 (CTest's skip). light/light_<model>.onnx models run as ONNX's runner does (use_dummy): each
                input without an initializer gets (np.arange(n).reshape(shape) / n).astype(float32), unknown dims 1,
                compared with light_<model>_output_0.pb.

Expected results: tests/conformance/onnx-<suite>.txt lists one `folder/case` per passing case, `# folder/case: reason`
per known failure. A full run fails on a regression (a listed case fails) and on an unexpected pass (a known failure
passes: move it to the list with --write-expected, which keeps hand-written reasons, those not starting with
'fails: '; a known failure whose reason starts with 'random:' may pass by chance and is not reported). FILTER
arguments run the cases whose `folder/case` contains one of them, without the list check.
Per-case tolerances: tests/conformance/onnx-<suite>-tolerances.txt, `folder/case rtol atol  # reason`.

Exit: 0 all as expected, 1 a difference from the list (or a failure with FILTER), 2 usage, 77 suite absent.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from onnx import ModelProto, TensorProto

try:  # onnx-data.proto's messages (python3-onnx 1.12 has them in onnx.onnx_data_pb)
    from onnx import MapProto, OptionalProto, SequenceProto
except ImportError:  # pragma: no cover
    from onnx.onnx_data_pb import MapProto, OptionalProto, SequenceProto

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFORMANCE = os.path.join(HERE, "conformance")
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-7
AUTO_PREFIX = "fails: "
SKIP = 77

# ---- element types: TensorProto.DataType number -> how its values are stored ----

FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, STRING, BOOL, FLOAT16, DOUBLE, UINT32, UINT64 = range(1, 14)
COMPLEX64, COMPLEX128, BFLOAT16 = 14, 15, 16
F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, UINT4, INT4, FLOAT4E2M1, F8E8M0, UINT2, INT2 = range(17, 27)

TYPE_NAMES = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string", 9: "bool",
    10: "float16", 11: "double", 12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16",
    17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
    23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2",
}
# raw_data layout of the types numpy holds directly
NUMPY_TYPES = {
    FLOAT: "<f4", UINT8: "u1", INT8: "i1", UINT16: "<u2", INT16: "<i2", INT32: "<i4", INT64: "<i8", BOOL: "u1",
    FLOAT16: "<f2", DOUBLE: "<f8", UINT32: "<u4", UINT64: "<u8", COMPLEX64: "<c8", COMPLEX128: "<c16",
}
FLOATING = {FLOAT, FLOAT16, DOUBLE, COMPLEX64, COMPLEX128, BFLOAT16, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ,
            FLOAT4E2M1, F8E8M0}


def _minifloat_table(exp_bits, man_bits, bias, kind):
    """Values of every code of a small float format (sign bit on top, when it has one). kind: 'ieee' (all-ones
    exponent is inf / NaN), 'fn' (no inf, S.1111.111 is NaN), 'fnuz' (no inf, no -0, 0x80 is NaN), 'plain' (no
    inf, no NaN)."""
    n = 1 << (1 + exp_bits + man_bits)
    out = np.empty(n, np.float64)
    for code in range(n):
        sign = -1.0 if code >> (exp_bits + man_bits) else 1.0
        e = (code >> man_bits) & ((1 << exp_bits) - 1)
        m = code & ((1 << man_bits) - 1)
        if e == 0:
            v = m / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        if kind == "ieee" and e == (1 << exp_bits) - 1:
            v = np.inf if m == 0 else np.nan
        elif kind == "fn" and e == (1 << exp_bits) - 1 and m == (1 << man_bits) - 1:
            v = np.nan
        out[code] = sign * v
    if kind == "fnuz":
        out[n // 2] = np.nan
    return out


_E8M0 = np.array([np.nan if c == 255 else 2.0 ** (c - 127) for c in range(256)])
MINIFLOAT = {
    F8E4M3FN: _minifloat_table(4, 3, 7, "fn"),
    F8E4M3FNUZ: _minifloat_table(4, 3, 8, "fnuz"),
    F8E5M2: _minifloat_table(5, 2, 15, "ieee"),
    F8E5M2FNUZ: _minifloat_table(5, 2, 16, "fnuz"),
    FLOAT4E2M1: _minifloat_table(2, 1, 1, "plain"),
    F8E8M0: _E8M0,
}
SUB_BYTE_BITS = {UINT4: 4, INT4: 4, FLOAT4E2M1: 4, UINT2: 2, INT2: 2}


def _unpack_bits(packed, bits, n):
    """n values of `bits` bits each from bytes, lowest bits first."""
    per = 8 // bits
    shifts = np.arange(per, dtype=np.uint8) * bits
    codes = (packed[:, None] >> shifts[None, :]) & ((1 << bits) - 1)
    return codes.reshape(-1)[:n].astype(np.uint8)


def decode_tensor(t):
    """TensorProto -> (data type number, shape tuple, ndarray of that shape). Sub-byte integers come out as
    int64 values, every float8/4 type as float64 values, bfloat16 as float32, strings as bytes objects."""
    dt, shape = t.data_type, tuple(t.dims)
    n = int(np.prod(shape, dtype=np.int64))
    if t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL:
        raise ValueError(f"tensor '{t.name}' has external data")
    raw = t.raw_data if t.HasField("raw_data") else None
    if dt == STRING:
        return dt, shape, np.array(list(t.string_data), dtype=object).reshape(shape)
    if dt in NUMPY_TYPES:
        if raw is not None:
            a = np.frombuffer(raw, dtype=NUMPY_TYPES[dt])
        elif dt in (FLOAT,):
            a = np.array(t.float_data, np.float32)
        elif dt == COMPLEX64:
            a = np.array(t.float_data, np.float32).view(np.complex64)
        elif dt == DOUBLE:
            a = np.array(t.double_data, np.float64)
        elif dt == COMPLEX128:
            a = np.array(t.double_data, np.float64).view(np.complex128)
        elif dt == INT64:
            a = np.array(t.int64_data, np.int64)
        elif dt in (UINT32, UINT64):
            a = np.array(t.uint64_data, np.uint64).astype(NUMPY_TYPES[dt])
        elif dt == FLOAT16:  # int32_data holds the bits
            a = np.array(t.int32_data, np.int64).astype(np.uint16).view(np.float16)
        else:
            a = np.array(t.int32_data, np.int64).astype(NUMPY_TYPES[dt])
        if dt == BOOL:
            a = a != 0
    elif dt == BFLOAT16:
        bits = np.frombuffer(raw, "<u2") if raw is not None else np.array(t.int32_data, np.int64).astype(np.uint16)
        a = (bits.astype(np.uint32) << 16).view(np.float32)
    elif dt in SUB_BYTE_BITS:
        # two (4-bit) or four (2-bit) values per byte, low bits first; int32_data holds one such byte per int32
        packed = np.frombuffer(raw, np.uint8) if raw is not None else np.array(t.int32_data, np.int64).astype(np.uint8)
        bits = SUB_BYTE_BITS[dt]
        codes = _unpack_bits(packed, bits, n)
        if dt == FLOAT4E2M1:
            a = MINIFLOAT[dt][codes]
        elif dt in (INT4, INT2):
            c = codes.astype(np.int64)
            a = np.where(c >= (1 << (bits - 1)), c - (1 << bits), c)
        else:
            a = codes.astype(np.int64)
    elif dt in MINIFLOAT:
        codes = np.frombuffer(raw, np.uint8) if raw is not None else np.array(t.int32_data, np.int64).astype(np.uint8)
        a = MINIFLOAT[dt][codes]
    else:
        raise ValueError(f"tensor '{t.name}': unknown element type {dt}")
    if a.size != n:
        raise ValueError(f"tensor '{t.name}': {a.size} values for shape {list(shape)}")
    return dt, shape, a.reshape(shape)


# A decoded value: ("tensor", (dtype, shape, array)) | ("sequence", [values]) | ("optional", value or None)
# | ("map", (key type, [keys], [values])).

def decode_message(msg):
    if isinstance(msg, TensorProto):
        return ("tensor", decode_tensor(msg))
    if isinstance(msg, SequenceProto):
        kind = msg.elem_type
        items = {1: msg.tensor_values, 3: msg.sequence_values, 4: msg.map_values, 5: msg.optional_values}
        if kind not in items:
            if kind == 0 and not (len(msg.tensor_values) or len(msg.sequence_values)):
                return ("sequence", [])
            raise ValueError(f"sequence '{msg.name}': element kind {kind} not supported")
        return ("sequence", [decode_message(m) for m in items[kind]])
    if isinstance(msg, OptionalProto):
        fields = {1: "tensor_value", 3: "sequence_value", 4: "map_value", 5: "optional_value"}
        if msg.elem_type == 0:
            return ("optional", None)
        if msg.elem_type not in fields:
            raise ValueError(f"optional '{msg.name}': element kind {msg.elem_type} not supported")
        f = fields[msg.elem_type]
        return ("optional", decode_message(getattr(msg, f)) if msg.HasField(f) else None)
    if isinstance(msg, MapProto):
        keys = list(msg.string_keys) if msg.key_type == STRING else list(msg.keys)
        return ("map", (msg.key_type, keys, decode_message(msg.values)[1]))
    raise TypeError(type(msg))


def message_class(type_proto):
    """The .pb message a graph input/output of this TypeProto is stored as."""
    which = type_proto.WhichOneof("value") if type_proto is not None else None
    return {"sequence_type": SequenceProto, "optional_type": OptionalProto, "map_type": MapProto}.get(
        which, TensorProto)


def load_value(path, type_proto):
    with open(path, "rb") as f:
        data = f.read()
    msg = message_class(type_proto)()
    msg.ParseFromString(data)
    value = decode_message(msg)
    if (value[0] == "tensor" and value[1][0] == UINT16 and type_proto is not None
            and type_proto.tensor_type.elem_type == BFLOAT16):
        # ONNX 1.12's data stores bfloat16 as uint16 tensors of the bits (numpy has no bfloat16)
        _, shape, bits = value[1]
        value = ("tensor", (BFLOAT16, shape, (bits.astype(np.uint32) << 16).view(np.float32)))
    return value


# ---- comparison ----

def _fmt(v):
    return repr(v.decode(errors="replace") if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)


def compare(got, exp, rtol, atol, where="output"):
    """None when got matches exp, else a one-line description of the first mismatch."""
    if got[0] != exp[0]:
        return f"{where}: a {got[0]}, expected a {exp[0]}"
    kind = exp[0]
    if kind == "optional":
        if (got[1] is None) != (exp[1] is None):
            return f"{where}: optional is {'empty' if got[1] is None else 'set'}, expected the other"
        return None if exp[1] is None else compare(got[1], exp[1], rtol, atol, where)
    if kind == "sequence":
        if len(got[1]) != len(exp[1]):
            return f"{where}: sequence of {len(got[1])}, expected {len(exp[1])}"
        for j, (g, e) in enumerate(zip(got[1], exp[1])):
            r = compare(g, e, rtol, atol, f"{where}[{j}]")
            if r:
                return r
        return None
    if kind == "map":
        (gk, gkeys, gvals), (ek, ekeys, evals) = got[1], exp[1]
        if gk != ek or gkeys != ekeys:
            return f"{where}: map keys {gkeys[:8]}, expected {ekeys[:8]}"
        return compare(("sequence", gvals), ("sequence", evals), rtol, atol, where)
    (gdt, gshape, g), (edt, eshape, e) = got[1], exp[1]
    if gdt != edt:
        return f"{where}: element type {TYPE_NAMES.get(gdt, gdt)}, expected {TYPE_NAMES.get(edt, edt)}"
    if gshape != eshape:
        return f"{where}: shape {list(gshape)}, expected {list(eshape)}"
    if edt in FLOATING:
        g = g.astype(np.complex128 if edt in (COMPLEX64, COMPLEX128) else np.float64)
        e = e.astype(g.dtype)
        nan_g, nan_e = np.isnan(g), np.isnan(e)
        inf = np.isinf(g) | np.isinf(e)
        with np.errstate(invalid="ignore"):
            ok = np.where(nan_g | nan_e, nan_g & nan_e,
                          np.where(inf, g == e, np.abs(g - e) <= atol + rtol * np.abs(e)))
    else:
        ok = g == e
    ok = np.asarray(ok)
    if not ok.all():
        bad = np.argwhere(~ok)
        i = tuple(bad[0]) if ok.ndim else ()
        return (f"{where}: {len(bad)} of {ok.size} values differ, first at {list(i)}: "
                f"{_fmt(g[i])}, expected {_fmt(e[i])}")
    return None


# ---- cases ----

class Case:
    def __init__(self, name, model, datasets, light=None):
        self.name = name          # folder/case
        self.model = model        # path of model.onnx
        self.datasets = datasets  # [(input paths, output paths)]
        self.light = light        # expected output .pb of a light model (inputs made up as ONNX's runner does)


def suite_root(suite):
    if suite == "1.12":
        return "/usr/share/libonnx-testdata/data", ["node", "pytorch-converted", "pytorch-operator", "simple"]
    if os.environ.get("OTTER_ONNX_1_23"):  # explicit: only there
        candidates = [os.environ["OTTER_ONNX_1_23"]]
    else:
        candidates = [os.path.join(REPO, "..", "shared", "onnx-1.23"), "/work/shared/onnx-1.23"]
    for c in candidates:
        if os.path.isdir(os.path.join(c, "backend", "node")):
            return os.path.join(os.path.abspath(c), "backend"), [
                "node", "pytorch-converted", "pytorch-operator", "simple", "light"]
    return None, candidates


def _numbered(pattern):
    files = glob.glob(pattern)
    return sorted(files, key=lambda p: int(re.search(r"_(\d+)\.pb$", p).group(1)))


def find_cases(root, folders):
    cases = []
    for folder in folders:
        base = os.path.join(root, folder)
        if not os.path.isdir(base):
            continue
        if folder == "light":
            for model in sorted(glob.glob(os.path.join(base, "light_*.onnx"))):
                stem = model[:-len(".onnx")]
                cases.append(Case(f"light/{os.path.basename(stem)}", model, [], light=f"{stem}_output_0.pb"))
            continue
        for name in sorted(os.listdir(base)):
            model = os.path.join(base, name, "model.onnx")
            if not os.path.isfile(model):
                continue
            sets = sorted(glob.glob(os.path.join(base, name, "test_data_set_*")))
            datasets = [(_numbered(os.path.join(d, "input_*.pb")), _numbered(os.path.join(d, "output_*.pb")))
                        for d in sets]
            cases.append(Case(f"{folder}/{name}", model, datasets))
    return cases


def light_inputs(graph, tmp):
    """ONNX's runner's dummy inputs for a light model (generate_dummy_data with random=False)."""
    from onnx import numpy_helper
    inits = {i.name for i in graph.initializer}
    paths = []
    for x in graph.input:
        if x.name in inits:
            continue
        if x.type.tensor_type.elem_type != FLOAT:
            raise ValueError(f"input '{x.name}' is not float")
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        value = (np.arange(n).reshape(shape) / n).astype(np.float32)
        path = os.path.join(tmp, f"input_{len(paths)}.pb")
        with open(path, "wb") as f:
            f.write(numpy_helper.from_array(value, x.name).SerializeToString())
        paths.append(path)
    return paths


def run_case(case, otter, timeout, tolerances, keep_dir=None):
    """(passed, reason)."""
    model = ModelProto()
    with open(case.model, "rb") as f:
        model.ParseFromString(f.read())
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    rtol, atol = tolerances.get(case.name, (DEFAULT_RTOL, DEFAULT_ATOL))
    with tempfile.TemporaryDirectory(prefix="otter_backend_") as tmp:
        datasets = case.datasets
        if case.light:
            datasets = [(light_inputs(graph, tmp), [case.light])]
        if not datasets:
            return False, "no test data set"
        for k, (inputs, outputs) in enumerate(datasets):
            if len(inputs) == len(graph.input):
                names = [x.name for x in graph.input]
            else:
                names = [x.name for x in graph.input if x.name not in inits]
            if len(inputs) > len(names):
                return False, f"{len(inputs)} input files, the graph has {len(names)} inputs"
            outdir = os.path.join(tmp, f"out_{k}")
            cmd = [otter, "run", "-q", "-t", "1", "--pb", "-o", outdir, case.model]
            cmd += [f"{names[i]}={p}" for i, p in enumerate(inputs)]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
            except subprocess.TimeoutExpired:
                return False, f"timeout after {timeout:g} s"
            if r.returncode != 0:
                first = next((line for line in r.stderr.splitlines() if line.strip()), "")
                # stable across runs and machines: the scratch folder and the case folder by name
                first = first.replace(tmp, "TMP").replace(os.path.dirname(case.model) + "/", "")
                how = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
                return False, f"otter run: {how}: {first}"
            if len(outputs) > len(graph.output):
                return False, f"{len(outputs)} expected outputs, the graph has {len(graph.output)}"
            for i, exp_path in enumerate(outputs):
                tp = graph.output[i].type if graph.output[i].HasField("type") else None
                got_path = os.path.join(outdir, f"output_{i}.pb")
                if not os.path.exists(got_path):
                    return False, f"output {i} ('{graph.output[i].name}'): otter wrote no {got_path}"
                try:
                    exp = load_value(exp_path, tp)
                    got = load_value(got_path, tp)
                except Exception as err:  # a .pb that doesn't parse is this case's failure
                    return False, f"output {i} ('{graph.output[i].name}'): {type(err).__name__}: {err}"
                diff = compare(got, exp, rtol, atol, f"output {i} ('{graph.output[i].name}')")
                if diff:
                    if keep_dir:
                        shutil.copytree(outdir, os.path.join(keep_dir, case.name.replace("/", "__")),
                                        dirs_exist_ok=True)
                    return False, (f"data set {k}: " if len(datasets) > 1 else "") + diff
    return True, ""


# ---- expected-pass list and tolerances ----

def read_expected(path):
    """(passing set, {case: reason} of known failures)."""
    passing, reasons = set(), {}
    if not os.path.exists(path):
        return passing, reasons
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"#\s*(\S+/\S+?):\s*(.*)$", line)
            if m:
                reasons[m.group(1)] = m.group(2)
            elif line.strip() and not line.startswith("#"):
                passing.add(line.strip())
    return passing, reasons


def write_expected(path, suite, folders, results, old_reasons):
    lines = [f"# ONNX {suite} backend cases otter passes through `otter run` (tests/onnx_backend.py). One case per",
             "# line; a commented line '# folder/case: reason' is a known failure. Regenerate with",
             f"#   /usr/bin/python3 tests/onnx_backend.py --suite {suite} --otter build/release/otter --write-expected",
             f"# which keeps hand-written reasons (those not starting with '{AUTO_PREFIX}')."]
    for folder in folders:
        lines.append(f"# ---- {folder} ----")
        for name in sorted(n for n in results if n.split("/")[0] == folder):
            ok, why = results[name]
            if ok:
                lines.append(name)
            else:
                old = old_reasons.get(name)
                reason = old if old and not old.startswith(AUTO_PREFIX) else AUTO_PREFIX + why
                lines.append(f"# {name}: {reason}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_tolerances(path):
    """{case: (rtol, atol)}; every override must say why (a `# reason` after the numbers)."""
    tols = {}
    if os.path.exists(path):
        with open(path) as f:
            for k, line in enumerate(f, 1):
                body, _, reason = line.partition("#")
                fields = body.split()
                if not fields:
                    continue
                if len(fields) != 3 or not reason.strip():
                    raise SystemExit(f"{path}:{k}: want `folder/case rtol atol  # reason`, not: {line.strip()}")
                tols[fields[0]] = (float(fields[1]), float(fields[2]))
    return tols


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("filters", nargs="*", metavar="FILTER", help="run only cases whose folder/case contains one")
    ap.add_argument("--suite", choices=["1.12", "1.23"], default="1.12")
    ap.add_argument("--otter", default=os.environ.get("OTTER_CLI", os.path.join(REPO, "build", "release", "otter")),
                    help="the otter binary (default: $OTTER_CLI, else build/release/otter)")
    ap.add_argument("--jobs", "-j", type=int, default=2, help="cases run in parallel (default 2)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per `otter run` (default 120)")
    ap.add_argument("--write-expected", action="store_true", help="rewrite the expected-pass list from this run")
    ap.add_argument("--keep", metavar="DIR", help="copy the outputs of each mismatching case under DIR")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failure's reason")
    args = ap.parse_args()

    root, folders = suite_root(args.suite)
    if root is None:
        print(f"SKIPPED: ONNX {args.suite}'s backend suite is not at any of {folders}: nothing was tested "
              "(set OTTER_ONNX_1_23)", flush=True)
        return SKIP
    if not (os.path.isfile(args.otter) and os.access(args.otter, os.X_OK)):
        print(f"onnx_backend: no otter binary at {args.otter} (use --otter)", file=sys.stderr)
        return 2
    if args.write_expected and args.filters:
        print("onnx_backend: --write-expected needs the whole suite (no FILTER)", file=sys.stderr)
        return 2
    list_path = os.path.join(CONFORMANCE, f"onnx-{args.suite}.txt")
    tolerances = read_tolerances(os.path.join(CONFORMANCE, f"onnx-{args.suite}-tolerances.txt"))
    cases = find_cases(root, folders)
    if args.filters:
        cases = [c for c in cases if any(f in c.name for f in args.filters)]
    print(f"ONNX {args.suite} backend suite at {root}: {len(cases)} cases, otter {args.otter}, "
          f"{args.jobs} jobs", flush=True)

    t0 = time.monotonic()
    results = {}

    def one(case):
        try:
            return case.name, run_case(case, args.otter, args.timeout, tolerances, args.keep)
        except Exception as err:  # a case the harness can't read fails alone, with the reason
            return case.name, (False, f"harness: {type(err).__name__}: {err}")

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for name, res in pool.map(one, cases):
            results[name] = res
            if args.verbose and not res[0]:
                print(f"FAIL {name}: {res[1]}", flush=True)
    elapsed = time.monotonic() - t0

    total_pass = 0
    for folder in folders:
        names = [n for n in results if n.split("/")[0] == folder]
        if names:
            p = sum(results[n][0] for n in names)
            total_pass += p
            print(f"  {folder:20s} {p:5d} of {len(names):5d} pass ({100 * p / len(names):.1f}%)")
    print(f"ONNX {args.suite}: {total_pass} of {len(results)} cases pass ({elapsed:.1f} s)", flush=True)

    if args.filters:
        return 0 if total_pass == len(results) else 1
    passing, reasons = read_expected(list_path)
    if args.write_expected:
        write_expected(list_path, args.suite, folders, results, reasons)
        print(f"wrote {list_path}")
        return 0
    regressions = sorted(n for n in results if n in passing and not results[n][0])
    # a case whose reason starts with "random:" compares with numpy's random draws: it passes only by chance
    unexpected = sorted(n for n in results if n not in passing and results[n][0]
                        and not reasons.get(n, "").startswith("random:"))
    unlisted = sorted(n for n in passing if n not in results)
    for n in regressions:
        print(f"REGRESSION {n}: {results[n][1]}")
    for n in unexpected:
        print(f"UNEXPECTED PASS {n} (known failure: {reasons.get(n, 'not in the list')}): add it to {list_path}")
    for n in unlisted:
        print(f"MISSING {n}: listed as passing, but the suite has no such case")
    if regressions or unexpected or unlisted:
        print(f"FAIL: {len(regressions)} regressions, {len(unexpected)} unexpected passes, {len(unlisted)} "
              f"missing cases against {list_path}")
        return 1
    print(f"ok: as listed in {list_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
