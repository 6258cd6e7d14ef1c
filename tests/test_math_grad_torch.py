"""otter's gradients of CumProd, Det, LpPool, GlobalLpPool, DFT and STFT against torch.autograd.

Each case is one ONNX node reading h = x + w, where w is the trained initializer holding the test
values and x a zero input (so dLoss/dw is the node's input gradient), followed by MSELoss against a
random target; float inputs after it (STFT's window) are trained initializers as well:

1. `otter artifacts MODEL -o DIR --loss MSELoss` makes the artifacts; otter's runtime (libotter.so
   through ctypes) runs training_model.onnx once with zeroed gradient buffers, which then hold the
   gradients.
2. torch.autograd, in float64, differentiates the same function written with torch's own operators:
   torch.cumprod (flipped for reverse, shifted for exclusive), torch.linalg.det, torch.fft's fft, ifft,
   rfft and irfft (DFT with inverse, onesided, dft_length and axis), torch.stft (uncentred, windowed,
   one- and two-sided), F.lp_pool2d (p = 2,
   where its x.pow(p) is ONNX's |x|^p), and for the windows F.lp_pool2d can't express (pads,
   dilations, ceil_mode, p = 1 and 3 over signed inputs) the ONNX definition (sum of |x|^p over each
   window of the zero-padded input, unfolded, to the power 1/p).

Inputs hold exact zeros where the gradient must not divide by x (CumProd) and singular matrices of
rank M - 1 (Det, where torch's gradient is the adjugate). Det runs on batches only: one matrix's
scalar output would need a rank-0 target, and testlib's tensors are at least 1-D.

Norm: max|otter - torch| / max|torch| <= 1e-4 per case (float32 against float64). Skips (exit 77) only
without torch.
"""
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: python3-torch is not installed")
    sys.exit(77)

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import LIB, check, run_cli  # noqa: E402
from test_torch_grads import Otter, Session  # noqa: E402

WORK = tl.work_dir("math_grad_torch")
GRAD_TOL = 1e-4
worst = [0.0, ""]


def cumprod_ref(axis, exclusive=False, reverse=False):
    def f(w):
        t = w.flip(axis) if reverse else w
        y = torch.cumprod(t, axis)
        if exclusive:
            ones = torch.ones_like(y.narrow(axis, 0, 1))
            y = torch.cat([ones, y.narrow(axis, 0, y.shape[axis] - 1)], axis)
        return y.flip(axis) if reverse else y
    return f


def lp_pool_ref(p, kernel, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=False):
    """ONNX LpPool over [N, C, H, W]: (sum over each window of |x|^p)^(1/p), the padding adding zeros;
    with ceil_mode the last windows may run past the padded input, where zeros are added as well."""
    def f(w):
        n, c, h, wd = w.shape
        extent = [h + pads[0] + pads[2], wd + pads[1] + pads[3]]
        extra = [0, 0]
        for i in range(2):
            span = dilations[i] * (kernel[i] - 1) + 1
            steps = (extent[i] - span) / strides[i]
            out = int(np.ceil(steps) if ceil_mode else np.floor(steps)) + 1
            if ceil_mode and (out - 1) * strides[i] >= extent[i] - pads[2 + i]:
                out -= 1  # a last window starting in the end padding is dropped (as PyTorch and ONNX do)
            extra[i] = max(0, (out - 1) * strides[i] + span - extent[i])
        padded = F.pad(w.abs().pow(p), (pads[1], pads[3] + extra[1], pads[0], pads[2] + extra[0]))
        cols = F.unfold(padded, kernel, dilation=dilations, stride=strides)
        out_h = (padded.shape[2] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
        return cols.view(n, c, kernel[0] * kernel[1], -1).sum(2).pow(1.0 / p).view(n, c, out_h, -1)
    return f


def global_lp_ref(p):
    return lambda w: w.abs().pow(p).flatten(2).sum(2).pow(1.0 / p).view(*w.shape[:2], *([1] * (w.dim() - 2)))


def fft_ref(fn, axis, n=None, complex_in=False, real_out=False):
    """torch.fft.<fn> along axis of ONNX's signal layout ([..., 1] real or [..., 2] complex); the output
    back in that layout."""
    def f(w):
        x = torch.view_as_complex(w) if complex_in else w[..., 0]
        y = getattr(torch.fft, fn)(x, n=n, dim=axis)
        return y.unsqueeze(-1) if real_out else torch.view_as_real(y)
    return f


def stft_ref(step, onesided=True):
    """torch.stft without centring, as ONNX's STFT: [B, frames, bins, 2]; the window is trained too."""
    def f(w, win):
        y = torch.stft(w[..., 0], len(win), hop_length=step, window=win, center=False, onesided=onesided,
                       return_complex=True)
        return torch.view_as_real(y.transpose(1, 2))
    return f


def with_zeros(shape, rng):
    a = rng.uniform(0.3, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    a.flat[::5] = 0.0  # zeros at every 5th element: lines with none, one and two
    return a.astype(np.float32)


def singular(shape, rng):
    a = rng.standard_normal(shape)
    a[..., -1, :] = a[..., 0, :] + 0.5 * a[..., 1, :]  # rank M - 1
    return a.astype(np.float32)


def case(label, op, opset, values, ref, attrs=None, extra_inputs=()):
    """extra_inputs: (name, array) constant inputs after X."""
    return dict(label=label, op=op, opset=opset, values=values, ref=ref, attrs=attrs or {}, extra=extra_inputs)


def cases(rng):
    randn = lambda shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(6) / 6)).astype(np.float32)
    ax = lambda a: (("axis", np.array(a, np.int64)),)  # noqa: E731
    return [
        case("cumprod zeros", "CumProd", 26, with_zeros((5, 4), rng), cumprod_ref(1), {}, ax(1)),
        case("cumprod exclusive", "CumProd", 26, with_zeros((5, 4), rng), cumprod_ref(1, True), {"exclusive": 1},
             ax(-1)),
        case("cumprod reverse axis 0", "CumProd", 26, with_zeros((4, 3, 2), rng), cumprod_ref(0, reverse=True),
             {"reverse": 1}, ax(0)),
        case("cumprod exclusive reverse", "CumProd", 26, with_zeros((3, 6), rng), cumprod_ref(1, True, True),
             {"exclusive": 1, "reverse": 1}, ax(1)),
        case("det 5x5", "Det", 13, rng.standard_normal((2, 5, 5)).astype(np.float32), torch.linalg.det),
        case("det batched", "Det", 13, rng.standard_normal((2, 3, 3, 3)).astype(np.float32), torch.linalg.det),
        case("det singular", "Det", 13, singular((3, 4, 4), rng), torch.linalg.det),
        case("lp_pool2d p 2", "LpPool", 17, rng.standard_normal((2, 3, 6, 6)).astype(np.float32),
             lambda w: F.lp_pool2d(w, 2, (2, 3), stride=(2, 1)), {"p": 2, "kernel_shape": [2, 3], "strides": [2, 1]}),
        case("lp_pool p 1 pads", "LpPool", 18, rng.standard_normal((1, 2, 5, 5)).astype(np.float32),
             lp_pool_ref(1, (3, 3), pads=(1, 1, 1, 1)), {"p": 1, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        case("lp_pool p 3 dilations strides", "LpPool", 18, rng.standard_normal((1, 2, 6, 7)).astype(np.float32),
             lp_pool_ref(3, (2, 2), strides=(2, 1), dilations=(2, 3)),
             {"p": 3, "kernel_shape": [2, 2], "strides": [2, 1], "dilations": [2, 3]}),
        case("lp_pool p 2 ceil_mode", "LpPool", 18, rng.standard_normal((2, 2, 5, 6)).astype(np.float32),
             lp_pool_ref(2, (3, 2), strides=(2, 2), pads=(1, 0, 0, 1), ceil_mode=True),
             {"p": 2, "kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 0, 1], "ceil_mode": 1}),
        case("fft real", "DFT", 17, randn((2, 6, 1)), fft_ref("fft", 1)),
        case("ifft complex n 7", "DFT", 17, randn((2, 5, 2)), fft_ref("ifft", 1, 7, complex_in=True),
             {"inverse": 1}, (("n", np.array(7, np.int64)),)),
        case("rfft n 4 (cuts)", "DFT", 17, randn((3, 6, 1)), fft_ref("rfft", 1, 4), {"onesided": 1},
             (("n", np.array(4, np.int64)),)),
        case("fft axis 0 (DFT-20)", "DFT", 20, randn((4, 3, 2)), fft_ref("fft", 0, complex_in=True), {},
             (("n", np.array(4, np.int64)), ("axis", np.array(0, np.int64)))),
        case("irfft n 7 (DFT-20)", "DFT", 20, randn((2, 4, 2)), fft_ref("irfft", 1, 7, True, True),
             {"inverse": 1, "onesided": 1}, (("n", np.array(7, np.int64)), ("axis", np.array(1, np.int64)))),
        case("irfft default length", "DFT", 20, randn((2, 5, 2)), fft_ref("irfft", 1, None, True, True),
             {"inverse": 1, "onesided": 1}),
        case("stft hann window", "STFT", 17, randn((2, 12, 1)), stft_ref(3), {},
             (("step", np.array(3, np.int64)), ("window", hann))),
        case("stft two-sided", "STFT", 17, randn((1, 11, 1)), stft_ref(2, False), {"onesided": 0},
             (("step", np.array(2, np.int64)), ("window", hann[:5] + 0.5))),
        case("global_lp_pool p 1", "GlobalLpPool", 17, rng.standard_normal((2, 3, 4, 4)).astype(np.float32),
             global_lp_ref(1), {"p": 1}),
        case("global_lp_pool p 2", "GlobalLpPool", 17, rng.standard_normal((2, 3, 5)).astype(np.float32),
             global_lp_ref(2)),
        case("global_lp_pool p 3", "GlobalLpPool", 17, rng.standard_normal((1, 2, 3, 3)).astype(np.float32),
             global_lp_ref(3), {"p": 3}),
    ]


def build_model(c, out_shape):
    w = c["values"]
    inits = [numpy_helper.from_array(w, "w")] + [numpy_helper.from_array(v, n) for n, v in c["extra"]]
    nodes = [helper.make_node("Add", ["x", "w"], ["h"]),
             helper.make_node(c["op"], ["h"] + [n for n, _ in c["extra"]], ["output"], **c["attrs"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, w.shape)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", c["opset"])], ir_version=8)


def run_case(otter, c, rng):
    """Trains w and every float extra input (STFT's window); checks each one's gradient."""
    label = c["label"]
    params = {"w": c["values"], **{n: v for n, v in c["extra"] if v.dtype == np.float32}}
    leaves = {n: torch.from_numpy(v.astype(np.float64)).requires_grad_(True) for n, v in params.items()}
    y = c["ref"](*leaves.values())
    target = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    value = F.mse_loss(y, torch.from_numpy(target).double())
    value.backward()

    d = os.path.join(WORK, label.replace(" ", "_"))
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(build_model(c, list(y.shape)), path)
    rc, out = run_cli("artifacts", path, "-o", d, "--loss", "MSELoss")
    check(rc == 0, f"{label}: otter artifacts -> exit {rc}" + ("" if rc == 0 else f": {out[-600:]}"))
    if rc != 0:
        return
    sess = Session(otter, os.path.join(d, "training_model.onnx"))
    feeds = {}
    try:
        feeds = {"x": otter.tensor(np.zeros_like(c["values"])), "target": otter.tensor(target),
                 "lazy_reset_grad": otter.tensor(np.array([True]))}
        for n, v in params.items():
            feeds[n] = otter.tensor(v)
            feeds[n + "_grad.accumulation.buffer"] = otter.tensor(np.zeros_like(v))
        loss = float(sess.run({k: v for k, v in feeds.items() if k in sess.inputs}, [sess.outputs[0]])[0])
        grads = {n: Otter.to_numpy(feeds[n + "_grad.accumulation.buffer"]).astype(np.float64) for n in params}
    finally:
        for t in feeds.values():
            otter.lib.otter_tensor_free(t)
        sess.free()
    lerr = abs(loss - float(value)) / abs(float(value))
    check(lerr <= 1e-5, f"{label}: loss otter {loss:.8g} torch {float(value):.8g} rel err {lerr:.2e}")
    for n, grad in grads.items():
        ref = leaves[n].grad.numpy()
        err = float(np.abs(grad - ref).max()) / max(float(np.abs(ref).max()), 1e-30)
        if not err <= worst[0]:
            worst[:] = [err, f"{label} d{n}"]
        check(np.isfinite(err) and err <= GRAD_TOL and float(np.abs(ref).max()) > 0,
              f"{label}: d{n} {list(ref.shape)} vs torch.autograd, max|torch| {float(np.abs(ref).max()):.3g}, "
              f"rel err {err:.2e}")


def main():
    if not os.path.exists(LIB):
        print(f"FAIL {LIB} was not built")
        return 1
    otter = Otter(LIB)
    os.makedirs(WORK, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(15)
    for c in cases(rng):
        try:
            run_case(otter, c, rng)
        except Exception as e:  # one case's crash must not hide the others
            check(False, f"{c['label']}: {type(e).__name__}: {e}")
    print(f"worst gradient error {worst[0]:.3e} ({worst[1]}), tolerance {GRAD_TOL:g}")
    return tl.finish("test_math_grad_torch")


if __name__ == "__main__":
    sys.exit(main())
