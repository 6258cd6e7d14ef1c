"""The `otter` CLI: every verb answers --help with exit 0, a usage error with exit 2 and an invalid
model with exit 1 and a message naming the file, node or tensor at fault; and each verb does its job
on a small MNIST-like model made here with python3-onnx."""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402

VERBS = ["info", "print", "check", "clean", "merge", "extract", "dot", "convert"]


def otter(*args):
    r = tl.otter(*args, echo=False)
    return r.returncode, r.stdout, r.stderr


def dnn(path):
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "input"
    for k, (i, o) in enumerate([(784, 32), (32, 10)], 1):
        inits += [numpy_helper.from_array(rng.uniform(-.1, .1, (o, i)).astype(np.float32), f"fc{k}.weight"),
                  numpy_helper.from_array(rng.uniform(-.1, .1, (o,)).astype(np.float32), f"fc{k}.bias")]
        y = "output" if k == 2 else f"fc{k}_out"
        nodes.append(helper.make_node("Gemm", [x, f"fc{k}.weight", f"fc{k}.bias"], [y], name=f"fc{k}", transB=1))
        if k == 1:
            nodes.append(helper.make_node("Relu", [y], ["relu1_out"], name="relu1"))
            x = "relu1_out"
    # A dead node and a duplicate initializer for `clean` to remove.
    inits.append(numpy_helper.from_array(numpy_helper.to_array(inits[1]), "fc1.bias_copy"))
    nodes.append(helper.make_node("Neg", ["fc1.bias_copy"], ["dead_out"], name="dead"))
    g = helper.make_graph(nodes, "tiny_dnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 784])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    return m


def broken_models(tmp):
    """Models with one named fault each (made with helper; the checker is not run on them)."""
    out = {}
    garbage = os.path.join(tmp, "garbage.onnx")
    with open(garbage, "wb") as f:
        f.write(b"\x08\x07\x12\xff\xff\xff\xffnot a model at all")
    out["garbage"] = garbage

    def save(name, nodes, outputs=("y",)):
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [3]) for o in outputs])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
        m.ir_version = 8
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(m, path)
        out[name] = path

    save("dangling", [helper.make_node("Add", ["x", "ghost"], ["y"], name="bad_add")])
    save("cycle", [helper.make_node("Add", ["x", "r"], ["s"], name="cyc_add"),
                   helper.make_node("Relu", ["s"], ["r"], name="cyc_relu"),
                   helper.make_node("Neg", ["s"], ["y"], name="tail")])
    return out


def value_models(tmp):
    """Models whose inputs and outputs are sequences, optionals, strings and bfloat16 (`otter run` .pb I/O)."""
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    g = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s", "t"], ["s2"]), helper.make_node("SequenceLength", ["s2"], ["n"]),
         helper.make_node("OptionalHasElement", ["o"], ["has"]), helper.make_node("Identity", ["o"], ["o2"])],
        "values", [helper.make_value_info("s", seq_t), helper.make_tensor_value_info("t", TensorProto.FLOAT, [2]),
                   helper.make_value_info("o", opt_t)],
        [helper.make_value_info("s2", seq_t), helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("has", TensorProto.BOOL, []), helper.make_value_info("o2", opt_t)])
    seq = os.path.join(tmp, "values.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), seq)
    g = helper.make_graph(
        [helper.make_node("Cast", ["b"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["f"], ["text"], to=TensorProto.STRING)],
        "types", [helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [3])],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("text", TensorProto.STRING, [3])])
    types = os.path.join(tmp, "types.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), types)
    return seq, types


def pb_write(path, proto):
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    return path


def pb_read(path, cls):
    p = cls()
    with open(path, "rb") as f:
        p.ParseFromString(f.read())
    return p


def check_run_values(tmp):
    """`otter run` reads and writes sequences and optionals as .pb (onnx-data.proto), writes what .npy can't hold
    as .pb with a note, takes bfloat16 stored as uint16 bits, and names each file once in its errors."""
    seq_model, types_model = value_models(tmp)
    a, b, t = (np.arange(k, k + 3, dtype=np.float32) for k in (0, 3, 6))
    s_pb = pb_write(os.path.join(tmp, "s.pb"), numpy_helper.from_list([a, b[:2]], "s"))
    t_pb = pb_write(os.path.join(tmp, "t.pb"), numpy_helper.from_array(t[:2], "t"))
    o_full = pb_write(os.path.join(tmp, "o_full.pb"), numpy_helper.from_optional(t[:2], "o"))
    o_empty = pb_write(os.path.join(tmp, "o_empty.pb"), numpy_helper.from_optional(None, "o"))
    for o_pb, has in ((o_full, True), (o_empty, False)):
        outdir = os.path.join(tmp, f"values_{has}")
        rc, so, se = otter("run", seq_model, f"s={s_pb}", f"t={t_pb}", f"o={o_pb}", "--pb", "-o", outdir)
        if rc != 0:
            check(False, f"otter run on sequences and optionals (o {'set' if has else 'empty'}): exit 0: {se.strip()}")
            continue
        got = numpy_helper.to_list(pb_read(os.path.join(outdir, "output_0.pb"), onnx.SequenceProto))
        n = numpy_helper.to_array(pb_read(os.path.join(outdir, "output_1.pb"), TensorProto))
        got_has = numpy_helper.to_array(pb_read(os.path.join(outdir, "output_2.pb"), TensorProto))
        o2 = numpy_helper.to_optional(pb_read(os.path.join(outdir, "output_3.pb"), onnx.OptionalProto))
        check(len(got) == 3 and all(np.array_equal(x, y) for x, y in zip(got, [a, b[:2], t[:2]])) and n == 3,
              "otter run --pb: seq(float) input from a SequenceProto, output written as a SequenceProto of 3")
        check(bool(got_has) == has and ((o2 is None) if not has else np.array_equal(o2, t[:2])),
              f"otter run --pb: optional input {'with a value' if has else 'empty'} read from an OptionalProto, "
              f"the Identity of it written as one ({'' if has else 'no '}value)")
        check(os.path.exists(os.path.join(outdir, "output_1.npy")) and not os.path.exists(
            os.path.join(outdir, "output_0.npy")) and "output 0 's2' is a sequence, which .npy cannot hold" in se,
              f"otter run -o: tensors as .npy, the sequence as .pb only, with a note: {se.strip()}")
    outdir = os.path.join(tmp, "values_plain")
    rc, so, se = otter("run", seq_model, f"s={s_pb}", f"t={t_pb}", f"o={t_pb}", "--pb", "-o", outdir)
    o2 = numpy_helper.to_optional(pb_read(os.path.join(outdir, "output_3.pb"), onnx.OptionalProto)) if rc == 0 else None
    check(o2 is not None and np.array_equal(o2, t[:2]), f"otter run: a plain TensorProto for an optional tensor {se}")
    rc, so, se = otter("run", seq_model, f"s={t_pb}", f"t={t_pb}", f"o={o_empty}")
    check(rc == 1 and "input 's'" in se and "SequenceProto" in se and se.count("t.pb") == 1,
          f"otter run with a TensorProto for a sequence input: exit 1 naming the input and file once: {se.strip()}")

    # bfloat16 given as uint16 bits (ONNX 1.12's test data) is read as bfloat16; strings go to .pb with a note.
    bits = (np.array([1.5, -2.0, 3.25], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b_pb = pb_write(os.path.join(tmp, "b.pb"), numpy_helper.from_array(bits, "b"))
    outdir = os.path.join(tmp, "types_out")
    rc, so, se = otter("run", types_model, f"b={b_pb}", "-o", outdir)
    f = np.load(os.path.join(outdir, "output_0.npy")) if rc == 0 else None
    text_pb = os.path.join(outdir, "output_1.pb")
    text = numpy_helper.to_array(pb_read(text_pb, TensorProto)) if os.path.exists(text_pb) else None
    check(f is not None and np.array_equal(f, [1.5, -2.0, 3.25]), "otter run: a uint16 .pb taken as bfloat16's bits")
    check(text is not None and [float(v) for v in text] == [1.5, -2.0, 3.25] and "output 1 'text' is a string tensor" in se and
          not os.path.exists(os.path.join(outdir, "output_1.npy")),
          f"otter run -o: a string output written as .pb with a note, not an abort: {se.strip()}")


def check_bool_reductions(tmp):
    """ReduceMax / ReduceMin on bool (opset 20) are any / all; over an empty slice false / true (the suites have
    no empty case)."""
    x = np.zeros((3, 4), bool)
    x[0, 1] = True
    x[2, :] = True
    for op, reduce in (("ReduceMax", np.any), ("ReduceMin", np.all)):
        g = helper.make_graph([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], "bool_reduce",
                              [helper.make_tensor_value_info("x", TensorProto.BOOL, [3, None]),
                               helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [3])])
        model = os.path.join(tmp, f"{op}.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9), model)
        axes = pb_write(os.path.join(tmp, "axes.pb"), numpy_helper.from_array(np.array([1], np.int64)))
        for data in (x, x[:, :0]):
            xin = pb_write(os.path.join(tmp, "xb.pb"), numpy_helper.from_array(data))
            outdir = os.path.join(tmp, "bool_out")
            rc, so, se = otter("run", model, f"x={xin}", f"axes={axes}", "-o", outdir)
            got = np.load(os.path.join(outdir, "output_0.npy")) if rc == 0 else None
            want = reduce(data, axis=1)
            check(got is not None and got.dtype == bool and np.array_equal(got, want),
                  f"{op} over bool {list(data.shape)} axis 1: {None if got is None else got.tolist()}, "
                  f"want {want.tolist()} {se.strip()}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny.onnx")
        dnn(model)
        bad = broken_models(tmp)
        out = os.path.join(tmp, "out.onnx")

        # Global options.
        rc, so, se = otter("--help")
        check(rc == 0 and all(v in so for v in VERBS), "otter --help: exit 0, lists every verb")
        rc, so, se = otter("--version")
        check(rc == 0 and so.startswith("otter "), f"otter --version: exit 0, '{so.strip()}'")
        rc, so, se = otter()
        check(rc == 2 and "usage" in se, "otter (no verb): exit 2 with usage")
        rc, so, se = otter("frobnicate")
        check(rc == 2 and "'frobnicate'" in se, "otter frobnicate: exit 2 naming the verb")
        rc, so, se = otter("help", "merge")
        check(rc == 0 and "--wire" in so, "otter help merge: exit 0, shows merge's options")

        # Every verb: --help 0, unknown option 2, missing arguments 2, unreadable model 1 naming the file.
        for v in VERBS:
            rc, so, se = otter(v, "--help")
            check(rc == 0 and so.startswith(f"usage: otter {v}"), f"otter {v} --help: exit 0")
            rc, so, se = otter(v, "--no-such-option", model)
            check(rc == 2 and "'--no-such-option'" in se, f"otter {v} --no-such-option: exit 2 naming it")
            rc, so, se = otter(v)
            check(rc == 2 and "usage" in se, f"otter {v} (no arguments): exit 2")
            args = {"merge": [bad["garbage"], model, "--wire", "a:b", "-o", out],
                    "extract": [bad["garbage"], "--outputs", "y", "-o", out],
                    "dot": [bad["garbage"], "-o", os.path.join(tmp, "x.dot")]}.get(v, [bad["garbage"], "-o", out])
            if v in ("info", "print", "check"):
                args = [bad["garbage"]]
            rc, so, se = otter(v, *args)
            check(rc == 1 and "garbage.onnx" in se, f"otter {v} garbage.onnx: exit 1 naming the file: {se.strip()}")

        # Usage errors specific to verbs.
        rc, so, se = otter("clean", model)
        check(rc == 2 and "--output" in se, "otter clean without -o: exit 2")
        rc, so, se = otter("merge", model, model, "-o", out)
        check(rc == 2 and "--wire" in se, "otter merge without --wire: exit 2")
        rc, so, se = otter("merge", model, model, "--wire", "nocolon", "-o", out)
        check(rc == 2 and "'nocolon'" in se, "otter merge --wire nocolon: exit 2 naming it")
        rc, so, se = otter("convert", model, "-o", out, "--external-data", "--threshold", "lots")
        check(rc == 2 and "'lots'" in se, "otter convert --threshold lots: exit 2")
        rc, so, se = otter("dot", model, "-o", os.path.join(tmp, "x.pdf"))
        check(rc == 2 and "x.pdf" in se, "otter dot -o x.pdf: exit 2 (unsupported extension)")

        # Invalid models: messages name the node or tensor at fault.
        rc, so, se = otter("check", bad["dangling"])
        check(rc == 1 and "ghost" in so + se and "bad_add" in so + se,
              f"otter check dangling: exit 1 naming node bad_add and tensor ghost: {(so + se).strip()}")
        rc, so, se = otter("check", bad["cycle"])
        check(rc == 1 and ("cyc_add" in so + se or "cyc_relu" in so + se), f"otter check cycle: exit 1: {(so + se).strip()}")
        rc, so, se = otter("clean", bad["cycle"], "-o", out)
        check(rc == 1 and "'cyc_add'" in se and "'cyc_relu'" in se and "'tail'" not in se,
              f"otter clean cycle: exit 1 naming the nodes on the cycle: {se.strip()}")
        # An edit that would write an invalid model writes nothing (issue 18, finding 9).
        unwritten = os.path.join(tmp, "unwritten.onnx")
        rc, so, se = otter("clean", bad["dangling"], "-o", unwritten)
        check(rc == 1 and "not a valid model, nothing written" in se and "ghost" in se and
              not os.path.exists(unwritten), f"otter clean of an invalid model: exit 1, no file: {se.strip()}")
        rc, so, se = otter("extract", model, "--inputs", "relu1_out", "--outputs", "output,fc1_out", "-o", out)
        check(rc == 1 and "'fc1_out'" in se and "'input'" in se,
              f"otter extract unreachable: exit 1 naming fc1_out and input: {se.strip()}")
        rc, so, se = otter("extract", model, "--outputs", "nope", "-o", out)
        check(rc == 1 and "'nope'" in se, f"otter extract unknown tensor: exit 1 naming it: {se.strip()}")
        rc, so, se = otter("merge", model, model, "--concat", "-o", out)
        check(rc == 1 and "defined in both" in se, f"otter merge without prefixes: exit 1 naming the clash: {se.strip()}")

        # The verbs doing their job.
        rc, so, se = otter("info", model)
        check(rc == 0 and "input: float32[batch,784]" in so and "Gemm" in so and "parameters: 25482" in so,
              "otter info: types, op counts and parameter count (784*32+32+32*10+10 + 32 for the copy = 25482)")
        rc, so, se = otter("print", model)
        check(rc == 0 and "%fc1_out = Gemm[transB = 1](%input, %fc1.weight, %fc1.bias)    # fc1" in so, "otter print: node line")

        # run: outputs equal numpy's forward pass; --repeat with --profile names where the time went.
        m = onnx.load(model)
        w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        x = np.random.default_rng(1).uniform(0, 1, (3, 784)).astype(np.float32)
        want = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0) @ w["fc2.weight"].T + w["fc2.bias"]
        xin, outdir = os.path.join(tmp, "x.npy"), os.path.join(tmp, "run_out")
        np.save(xin, x)
        rc, so, se = otter("run", model, f"input={xin}", "--outdir", outdir, "--repeat", "3", "--profile")
        got = np.load(os.path.join(outdir, "output_0.npy")) if rc == 0 else None
        check(got is not None and np.allclose(got, want, rtol=1e-5, atol=1e-6), "otter run: output equals numpy's")
        check(rc == 0 and "latency over 2 runs" in so and "profile:" in so and "FusedGemm" in so and "fc2" in so,
              f"otter run --repeat 3 --profile: latency, per-operator times (Gemm + Relu fused) and slowest nodes")
        rc, so, se = otter("run", model, f"nope={xin}")
        check(rc == 1 and "'nope'" in se, f"otter run with an unknown input name: exit 1 naming it: {se.strip()}")
        # an initializer that is also a graph input takes a file by name
        m.graph.input.append(helper.make_tensor_value_info("fc2.bias", TensorProto.FLOAT, [10]))
        with_init_input = os.path.join(tmp, "init_input.onnx")
        onnx.save(m, with_init_input)
        zero_bias = os.path.join(tmp, "zero_bias.npy")
        np.save(zero_bias, np.zeros(10, np.float32))
        rc, so, se = otter("run", with_init_input, f"input={xin}", f"fc2.bias={zero_bias}", "-o", outdir)
        got = np.load(os.path.join(outdir, "output_0.npy")) if rc == 0 else None
        check(got is not None and np.allclose(got, want - w["fc2.bias"], rtol=1e-5, atol=1e-6),
              f"otter run NAME=FILE overrides an initializer that is a graph input {se.strip()}")
        rc, so, se = otter("run", bad["dangling"], f"x={xin}")
        check(rc == 1 and se.count("dangling.onnx") == 1 and "bad_add" in se,
              f"otter run on a broken model: exit 1 naming the file once and the node: {se.strip()}")
        check_run_values(tmp)
        check_bool_reductions(tmp)
        rc, so, se = otter("check", model)
        check(rc == 0 and "valid" in so, "otter check: valid model exits 0")
        rc, so, se = otter("clean", model, "-o", out)
        cleaned = onnx.load(out)
        check(rc == 0 and [n.name for n in cleaned.graph.node] == ["fc1", "relu1", "fc2"] and
              len(cleaned.graph.initializer) == 4, f"otter clean: dead node and its initializer gone ({so.strip()})")
        onnx.checker.check_model(cleaned, full_check=True)
        rc, so, se = otter("extract", model, "--inputs", "input", "--outputs", "relu1_out", "-o", out)
        sub = onnx.load(out)
        check(rc == 0 and [n.name for n in sub.graph.node] == ["fc1", "relu1"] and
              [o.name for o in sub.graph.output] == ["relu1_out"], "otter extract input -> relu1_out: fc1, relu1")
        two = os.path.join(tmp, "two.onnx")
        rc, so, se = otter("merge", model, model, "--concat", "--prefix-a", "a_", "--prefix-b", "b_", "-o", two)
        m2 = onnx.load(two)
        check(rc == 0 and len(m2.graph.input) == 2 and len(m2.graph.output) == 2, "otter merge --concat: 2 inputs, 2 outputs")
        onnx.checker.check_model(m2, full_check=True)
        dot = os.path.join(tmp, "g.dot")
        rc, so, se = otter("dot", model, "-o", dot)
        text = open(dot).read() if os.path.exists(dot) else ""
        check(rc == 0 and text.startswith('digraph "tiny_dnn"') and "Gemm\\nfc1" in text, "otter dot -o g.dot")
        svg = os.path.join(tmp, "g.svg")
        rc, so, se = otter("dot", model, "-o", svg)
        check(rc == 0 and os.path.exists(svg) and "<svg" in open(svg).read(), "otter dot -o g.svg (graphviz)")

        # convert: external data out and back in, values unchanged.
        ext = os.path.join(tmp, "ext.onnx")
        rc, so, se = otter("convert", model, "-o", ext, "--external-data", "--threshold", "1K")
        data = ext + ".data"
        check(rc == 0 and os.path.exists(data), f"otter convert --external-data: side file written ({se.strip()})")
        me = onnx.load(ext, load_external_data=False)
        n_ext = sum(1 for t in me.graph.initializer if t.data_location == TensorProto.EXTERNAL)
        check(n_ext == 2, f"{n_ext} initializers external (want 2: fc1.weight, fc2.weight >= 1 KiB)")
        back = os.path.join(tmp, "back.onnx")
        rc, so, se = otter("convert", ext, "-o", back, "--inline")
        mb = onnx.load(back, load_external_data=False)
        orig = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
        same = all(t.data_location != TensorProto.EXTERNAL and np.array_equal(numpy_helper.to_array(t), orig[t.name])
                   for t in mb.graph.initializer)
        check(rc == 0 and same and len(mb.graph.initializer) == len(orig), "otter convert --inline: all inline, values equal")
    return tl.finish("test_cli")


if __name__ == "__main__":
    sys.exit(main())
