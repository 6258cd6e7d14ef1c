"""otter's gradients of the geometric operators against torch.autograd.

Each case is a one-operator ONNX model whose float operands are trainable initializers: GridSample
(X and grid; every mode, padding mode and align_corners on 4-D inputs, linear and nearest on 5-D;
points up to 1.2 outside [-1, 1], except bicubic with border padding, where ONNX and torch sample
outside the image differently),
AffineGrid (theta; 2-D and 3-D, both align_corners), Col2Im (torch's F.fold; strides, pads,
dilations) and DeformConv (torchvision.ops.deform_conv2d, with and without mask and bias, groups,
offset groups, strides, pads, dilations) and RoiAlign w.r.t. X (torchvision.ops.roi_align, avg
mode; aligned = half_pixel). The operator's output is multiplied by the graph input "input" (ones) so the model
has an input to feed.

1. onnx.helper writes the model (opset 16 for GridSample, 20 for the 5-D one and AffineGrid, 18 for
   Col2Im, 19 for DeformConv, 16 for RoiAlign).
2. `otter artifacts MODEL -o DIR --loss MSELoss` makes the artifacts; otter's runtime (libotter.so
   through ctypes) runs training_model.onnx once with zeroed gradient buffers, which then hold
   the gradients.
3. torch in float64 on the same values gives the reference loss and gradients.

Norm: per parameter, max|otter - torch| / max|torch| <= 1e-4; the loss to 1e-5 relative. Skips
(exit 77) only without torch.
"""
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: python3-torch is not installed")
    sys.exit(77)

try:  # DeformConv's and RoiAlign's reference; their cases say so and are left out without it
    from torchvision.ops import deform_conv2d, roi_align
except ImportError:
    deform_conv2d = roi_align = None

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import LIB, check, run_cli  # noqa: E402
from test_torch_grads import Otter, Session  # noqa: E402

WORK = tl.work_dir("geo_grad_torch")
GRAD_TOL = 1e-4
LOSS_TOL = 1e-5
worst = [0.0, ""]


def grid_sample_case(mode, pad, align, x_shape, grid_shape, opset=16):
    onnx_mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode) if opset >= 20 else mode

    def torch_fn(p):
        return F.grid_sample(p["x"], p["grid"], mode=mode, padding_mode=pad, align_corners=bool(align))
    label = f"gridsample_{len(x_shape)}d_{mode}_{pad}" + ("_align" if align else "")
    # ONNX clamps a bicubic point outside the image to its border before taking the 4 x 4 taps, torch
    # only clamps the taps: their forward results differ there, so those points stay inside.
    reach = 0.7 if (mode, pad) == ("bicubic", "border") else 1.2
    return (label, "GridSample", opset, dict(mode=onnx_mode, padding_mode=pad, align_corners=align),
            [("x", x_shape, 1.0), ("grid", grid_shape, reach)], [], torch_fn)


def affine_grid_case(size, align):
    r = len(size) - 2

    def torch_fn(p):
        return F.affine_grid(p["theta"], list(size), align_corners=bool(align))
    return (f"affinegrid_{r}d" + ("_align" if align else ""), "AffineGrid", 20, dict(align_corners=align),
            [("theta", (size[0], r, r + 1), 1.0)], [("size", np.array(size, np.int64))], torch_fn)


def col2im_case(label, n, c, image, block, stride=1, pad=0, dilation=1):
    blocks = 1
    for i, b in zip(image, block):
        blocks *= (i + 2 * pad - dilation * (b - 1) - 1) // stride + 1
    k = int(np.prod(block))

    def torch_fn(p):
        return F.fold(p["x"], tuple(image), tuple(block), dilation=dilation, padding=pad, stride=stride)
    attrs = dict(strides=[stride] * 2, pads=[pad] * 4, dilations=[dilation] * 2)
    return (label, "Col2Im", 18, attrs, [("x", (n, c * k, blocks), 1.0)],
            [("image", np.array(image, np.int64)), ("block", np.array(block, np.int64))], torch_fn)


def deform_conv_case(label, x_shape, w_shape, bias=True, mask=True, group=1, offset_group=1, stride=1, pad=0,
                     dilation=1):
    n, _, h, w = x_shape
    kh, kw = w_shape[2:]
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    params = [("x", x_shape, 1.0), ("w", w_shape, 1.0), ("offset", (n, 2 * offset_group * kh * kw, oh, ow), 1.5)]
    params += [("b", (w_shape[0],), 1.0) if bias else ("", None, 0)]  # "": an omitted input
    params += [("mask", (n, offset_group * kh * kw, oh, ow), 1.0)] if mask else []
    attrs = dict(group=group, offset_group=offset_group, strides=[stride] * 2, pads=[pad] * 4,
                 dilations=[dilation] * 2)

    def torch_fn(p):
        return deform_conv2d(p["x"], p["offset"], p["w"], p.get("b"), stride=stride, padding=pad, dilation=dilation,
                             mask=p.get("mask"))
    return (label, "DeformConv", 19, attrs, params, [], torch_fn)


ROIS = np.array([[0.6, 1.2, 6.4, 7.8], [2.2, 0.8, 9.6, 5.4], [1.0, 1.0, 3.0, 2.5]], np.float32)
BATCH_INDICES = np.array([1, 0, 1], np.int64)


def roi_align_case(label, ctm, sampling_ratio):
    attrs = dict(mode="avg", output_height=2, output_width=3, sampling_ratio=sampling_ratio, spatial_scale=0.5,
                 coordinate_transformation_mode=ctm)

    def torch_fn(p):
        boxes = torch.cat([torch.from_numpy(BATCH_INDICES).double()[:, None], torch.from_numpy(ROIS).double()], 1)
        return roi_align(p["x"], boxes, (2, 3), spatial_scale=0.5, sampling_ratio=sampling_ratio,
                         aligned=ctm == "half_pixel")
    return (label, "RoiAlign", 16, attrs, [("x", (2, 3, 6, 7), 1.0)],
            [("rois", ROIS), ("batch_indices", BATCH_INDICES)], torch_fn)


TORCHVISION_CASES = [
    deform_conv_case("deformconv_mask_bias", (2, 2, 5, 4), (3, 2, 2, 2)),
    deform_conv_case("deformconv_groups_strides_pads", (1, 4, 5, 5), (4, 2, 3, 3), mask=False, group=2,
                     offset_group=2, stride=2, pad=1),
    deform_conv_case("deformconv_dilations_no_bias", (1, 2, 6, 6), (2, 2, 2, 2), bias=False, dilation=2),
    roi_align_case("roialign_half_pixel", "half_pixel", 2),
    roi_align_case("roialign_output_half_pixel_adaptive", "output_half_pixel", 0),
]

CASES = (
    [grid_sample_case(m, p, a, (2, 3, 4, 5), (2, 3, 2, 2)) for m in ("bilinear", "nearest", "bicubic")
     for p in ("zeros", "border", "reflection") for a in (0, 1)]
    + [grid_sample_case(m, p, a, (1, 2, 3, 4, 3), (1, 2, 3, 2, 3), opset=20) for m in ("bilinear", "nearest")
       for p in ("zeros", "reflection") for a in (0, 1)]
    + [affine_grid_case(s, a) for s in ((2, 1, 3, 4), (2, 1, 2, 3, 4)) for a in (0, 1)]
    + [col2im_case("col2im", 2, 3, (4, 5), (2, 2)),
       col2im_case("col2im_strides_pads", 1, 2, (5, 5), (3, 2), stride=2, pad=1),
       col2im_case("col2im_dilations", 1, 2, (6, 5), (2, 2), dilation=2)]
)


def build_model(op, opset, attrs, names, values, consts, out_shape):
    inits = [numpy_helper.from_array(v, n) for n, v in values.items()]
    inits += [numpy_helper.from_array(v, n) for n, v in consts]
    node = helper.make_node(op, names + [n for n, _ in consts], ["y"], **attrs)
    scale = helper.make_node("Mul", ["y", "input"], ["output"])
    graph = helper.make_graph([node, scale], op, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_case(otter, case, seed):
    label, op, opset, attrs, params, consts, torch_fn = case
    rng = np.random.default_rng(seed)
    values = {name: (scale * rng.uniform(-1, 1, shape)).astype(np.float32) for name, shape, scale in params if name}
    ref_params = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in values.items()}
    y_ref = torch_fn(ref_params)
    target = rng.standard_normal(tuple(y_ref.shape)).astype(np.float32)
    value = F.mse_loss(y_ref, torch.from_numpy(target).double())
    value.backward()
    ref = {n: p.grad.numpy() for n, p in ref_params.items()}
    model = build_model(op, opset, attrs, [n for n, _, _ in params], values, consts, list(y_ref.shape))

    d = os.path.join(WORK, label)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    frozen = [n for n, v in consts if v.dtype == np.float32]  # RoiAlign's rois: not differentiated
    extra = ["--frozen", ",".join(frozen)] if frozen else []
    rc, out = run_cli("artifacts", path, "-o", d, "--loss", "MSELoss", *extra)
    check(rc == 0, f"{label}: otter artifacts -> exit {rc}" + ("" if rc == 0 else f": {out[-600:]}"))
    if rc != 0:
        return
    sess = Session(otter, os.path.join(d, "training_model.onnx"))
    feeds = {}
    try:
        buffers = {n: n[: -len("_grad.accumulation.buffer")] for n in sess.inputs
                   if n.endswith("_grad.accumulation.buffer")}
        feeds = {"input": otter.tensor(np.ones(1, np.float32)), "target": otter.tensor(target),
                 "lazy_reset_grad": otter.tensor(np.array([True]))}
        given = {**values, **dict(consts)}  # frozen initializers are inputs of the training model
        for n in sess.inputs:
            if n in given:
                feeds[n] = otter.tensor(given[n])
        for b, p in buffers.items():
            feeds[b] = otter.tensor(np.zeros_like(values[p]))
        loss_otter = float(sess.run(feeds, [sess.outputs[0]])[0])
        grads = {p: Otter.to_numpy(feeds[b]).astype(np.float64) for b, p in buffers.items()}
    finally:
        for t in feeds.values():
            otter.lib.otter_tensor_free(t)
        sess.free()

    lerr = abs(loss_otter - float(value)) / abs(float(value))
    check(lerr <= LOSS_TOL, f"{label}: loss otter {loss_otter:.8g} torch {float(value):.8g} rel err {lerr:.2e}")
    check(sorted(grads) == sorted(ref), f"{label}: trained {sorted(grads)}, expected {sorted(ref)}")
    tl.check_gradients(label, grads, ref, GRAD_TOL, worst)


def main():
    if not os.path.exists(LIB):
        print(f"FAIL {LIB} was not built")
        return 1
    otter = Otter(LIB)
    os.makedirs(WORK, exist_ok=True)
    torch.set_num_threads(1)
    cases = CASES + (TORCHVISION_CASES if deform_conv2d else [])
    if not deform_conv2d:
        print("note: torchvision is not installed, the DeformConv and RoiAlign cases are left out")
    for seed, case in enumerate(cases, 1):
        try:
            run_case(otter, case, seed)
        except Exception as e:  # one case's crash must not hide the others
            check(False, f"{case[0]}: {type(e).__name__}: {e}")
    print(f"worst gradient error {worst[0]:.3e} ({worst[1]}), tolerance {GRAD_TOL:g}")
    return tl.finish("test_geo_grad_torch")


if __name__ == "__main__":
    sys.exit(main())
