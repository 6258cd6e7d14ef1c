"""The seeds' MNIST DNN built through otter's C editing API (examples/mnist_dnn.c) is accepted by
python3-onnx's checker with full_check=True and by `otter check`; its structure and its
PyTorch-style initialization are as specified; the same seed gives the same bytes."""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check, run  # noqa: E402

EXAMPLE = os.environ.get("OTTER_MNIST_DNN", os.path.join(tl.BIN, "examples", "mnist_dnn"))
CLI = tl.CLI


def main():
    if not os.path.exists(EXAMPLE):
        print(f"FAIL example program {EXAMPLE} was not built (examples/CMakeLists.txt must be added to the build)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mnist_dnn.onnx")
        check(run([EXAMPLE, path, "--seed", "7"]).returncode == 0, "mnist_dnn exits 0")
        m = onnx.load(path)
        try:
            onnx.checker.check_model(m, full_check=True)
            check(True, "onnx.checker.check_model(full_check=True) accepts the model")
        except onnx.checker.ValidationError as e:
            check(False, f"onnx.checker rejects the model: {e}")
        check(run([CLI, "check", path]).returncode == 0, "otter check accepts the model")

        g = m.graph
        ops = [n.op_type for n in g.node]
        check(ops == ["Gemm", "Relu", "Gemm", "Relu", "Gemm"], f"ops {ops}")
        opset = {o.domain: o.version for o in m.opset_import}
        check(opset.get("", opset.get("ai.onnx")) == 14, f"opset imports {opset} (want ai.onnx 14)")
        for n in g.node:
            if n.op_type == "Gemm":
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
                check(attrs.get("transB") == 1, f"node {n.name}: Gemm attributes {attrs} (want transB=1)")

        def dims(vi):
            return [d.dim_param if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]

        check([i.name for i in g.input] == ["input"], f"inputs {[i.name for i in g.input]}")
        check(dims(g.input[0]) == ["batch", 784] and g.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT,
              f"input type float {dims(g.input[0])} (want float [batch, 784])")
        check([o.name for o in g.output] == ["output"] and dims(g.output[0]) == ["batch", 10],
              f"output {g.output[0].name} {dims(g.output[0])} (want output [batch, 10])")

        inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        want = {"fc1.weight": (200, 784), "fc1.bias": (200,), "fc2.weight": (200, 200), "fc2.bias": (200,),
                "fc3.weight": (10, 200), "fc3.bias": (10,)}
        got = {k: v.shape for k, v in inits.items()}
        check(got == want, f"initializer shapes {got}")
        params = sum(v.size for v in inits.values())
        check(params == 199210, f"parameters {params} (want 199210)")
        # PyTorch's nn.Linear default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
        for layer, fan_in in (("fc1", 784), ("fc2", 200), ("fc3", 200)):
            bound = 1.0 / np.sqrt(fan_in)
            w = inits[layer + ".weight"].astype(np.float64)
            b = inits[layer + ".bias"].astype(np.float64)
            worst = tl.worse(float(np.abs(w).max()), float(np.abs(b).max()))
            check(worst <= bound, f"{layer}: max |value| {worst:.6f} <= bound {bound:.6f}")
            std_want = bound / np.sqrt(3.0)
            se = std_want / np.sqrt(w.size)  # standard error of the mean
            check(abs(w.mean()) < 6 * se, f"{layer}.weight mean {w.mean():.2e} within 6 s.e. ({6 * se:.2e}) of 0")
            check(abs(w.std() / std_want - 1) < 0.05,
                  f"{layer}.weight std {w.std():.5f} vs uniform's {std_want:.5f} (within 5%)")

        # Same seed, same bytes; another seed, other weights.
        again = os.path.join(tmp, "again.onnx")
        other = os.path.join(tmp, "other.onnx")
        run([EXAMPLE, again, "--seed", "7"])
        run([EXAMPLE, other, "--seed", "8"])
        with open(path, "rb") as f1, open(again, "rb") as f2:
            check(f1.read() == f2.read(), "seed 7 twice: identical files")
        w8 = numpy_helper.to_array(onnx.load(other).graph.initializer[0])
        check(not np.array_equal(w8, inits["fc1.weight"]), "seed 8: different fc1.weight")

        # A forward pass in numpy gives finite logits of the right shape.
        x = np.random.default_rng(0).random((4, 784), dtype=np.float32)
        h = np.maximum(x @ inits["fc1.weight"].T + inits["fc1.bias"], 0)
        h = np.maximum(h @ inits["fc2.weight"].T + inits["fc2.bias"], 0)
        y = h @ inits["fc3.weight"].T + inits["fc3.bias"]
        check(y.shape == (4, 10) and np.isfinite(y).all(), f"numpy forward: logits {y.shape}, finite")
    return tl.finish("test_mnist_dnn")


if __name__ == "__main__":
    sys.exit(main())
