"""`otter merge` puts a preprocessing graph (uint8 image [N,28,28] -> Cast -> Div 255 -> Reshape
[-1,784]) in front of the MNIST DNN built by examples/mnist_dnn. The merged model passes
onnx.checker (full_check=True) and `otter check`, and evaluating its nodes (a small numpy
interpreter; Debian's onnx 1.12 has no onnx.reference) gives the same logits as preprocessing
and the DNN computed separately. Also: a wire with the wrong type is refused, naming the tensors."""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.mapping import TENSOR_TYPE_TO_NP_TYPE as NP_TYPE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check, run  # noqa: E402

EXAMPLE = os.environ.get("OTTER_MNIST_DNN", os.path.join(tl.BIN, "examples", "mnist_dnn"))
CLI = tl.CLI


def preprocess_model(out_type=TensorProto.FLOAT):
    nodes = [
        helper.make_node("Cast", ["image"], ["image_f"], name="to_float", to=out_type),
        helper.make_node("Div", ["image_f", "scale"], ["scaled"], name="scale"),
        helper.make_node("Reshape", ["scaled", "shape"], ["pixels"], name="flatten"),
    ]
    inits = [
        numpy_helper.from_array(np.array(255, dtype=NP_TYPE[out_type]), "scale"),
        numpy_helper.from_array(np.array([-1, 784], dtype=np.int64), "shape"),
    ]
    g = helper.make_graph(
        nodes, "preprocess",
        [helper.make_tensor_value_info("image", TensorProto.UINT8, ["N", 28, 28])],
        [helper.make_tensor_value_info("pixels", out_type, ["N", 784])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], producer_name="test_merge_preprocess")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def evaluate(model, feeds):
    """Run the few operators these models use, node by node, in numpy."""
    env = dict(feeds)
    for t in model.graph.initializer:
        env[t.name] = numpy_helper.to_array(t)
    for n in model.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        i = [env[x] for x in n.input]
        if n.op_type == "Cast":
            r = i[0].astype(NP_TYPE[a["to"]])
        elif n.op_type == "Div":
            r = (i[0] / i[1]).astype(i[0].dtype)
        elif n.op_type == "Reshape":
            r = i[0].reshape(i[1])
        elif n.op_type == "Relu":
            r = np.maximum(i[0], 0)
        elif n.op_type == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            r = a.get("alpha", 1.0) * (A @ B) + a.get("beta", 1.0) * i[2]
        else:
            raise RuntimeError(f"evaluate: no rule for {n.op_type}")
        env[n.output[0]] = r.astype(np.float32) if r.dtype == np.float64 else r
    return [env[o.name] for o in model.graph.output]


def main():
    if not os.path.exists(EXAMPLE):
        print(f"FAIL example program {EXAMPLE} was not built (examples/CMakeLists.txt must be added to the build)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        dnn = os.path.join(tmp, "mnist_dnn.onnx")
        pre = os.path.join(tmp, "preprocess.onnx")
        merged = os.path.join(tmp, "merged.onnx")
        check(run([EXAMPLE, dnn]).returncode == 0, "mnist_dnn exits 0")
        onnx.save(preprocess_model(), pre)

        p = run([CLI, "merge", pre, dnn, "--wire", "pixels:input", "--prefix-a", "pre/", "-o", merged])
        check(p.returncode == 0, "otter merge exits 0")
        m = onnx.load(merged)
        try:
            onnx.checker.check_model(m, full_check=True)
            check(True, "onnx.checker.check_model(full_check=True) accepts the merged model")
        except onnx.checker.ValidationError as e:
            check(False, f"onnx.checker rejects the merged model: {e}")
        check(run([CLI, "check", merged]).returncode == 0, "otter check accepts the merged model")

        g = m.graph
        ops = [n.op_type for n in g.node]
        check(ops == ["Cast", "Div", "Reshape", "Gemm", "Relu", "Gemm", "Relu", "Gemm"], f"merged ops {ops}")
        check([i.name for i in g.input] == ["pre/image"], f"merged inputs {[i.name for i in g.input]}")
        check([o.name for o in g.output] == ["output"], f"merged outputs {[o.name for o in g.output]}")
        check(g.node[3].input[0] == "pre/pixels", f"fc1 reads '{g.node[3].input[0]}' (want pre/pixels)")
        inits = sorted(t.name for t in g.initializer)
        check("pre/scale" in inits and "pre/shape" in inits and "fc1.weight" in inits, f"initializers {inits}")

        # Values: the merged graph against the two models run one after the other.
        img = np.random.default_rng(1).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
        got = evaluate(m, {"pre/image": img})[0]
        (pixels,) = evaluate(onnx.load(pre), {"image": img})
        (want,) = evaluate(onnx.load(dnn), {"input": pixels})
        direct = img.reshape(5, 784).astype(np.float32) / np.float32(255)
        err_pix = float(np.abs(pixels - direct).max())
        err = float(np.abs(got - want).max())
        check(got.shape == (5, 10), f"merged logits shape {got.shape} (want (5, 10))")
        check(err_pix == 0.0, f"preprocessing vs img/255 reshaped: max abs error {err_pix}")
        check(err == 0.0, f"merged vs separate: max abs error {err} over {got.size} logits")

        # A float16 preprocessing output does not fit the DNN's float input: refused, naming both.
        pre16 = os.path.join(tmp, "pre16.onnx")
        onnx.save(preprocess_model(TensorProto.FLOAT16), pre16)
        p = run([CLI, "merge", pre16, dnn, "--wire", "pixels:input", "-o", os.path.join(tmp, "bad.onnx")])
        check(p.returncode == 1 and "'pixels'" in p.stderr and "'input'" in p.stderr and "float16" in p.stderr,
              "type mismatch: exit 1 naming 'pixels', 'input' and float16")
        # Without a prefix the names still don't clash here; a wire to a missing input is named.
        p = run([CLI, "merge", pre, dnn, "--wire", "pixels:nope", "-o", os.path.join(tmp, "bad.onnx")])
        check(p.returncode == 1 and "'nope'" in p.stderr, "unknown input: exit 1 naming 'nope'")
    return tl.finish("test_merge_preprocess")


if __name__ == "__main__":
    sys.exit(main())
