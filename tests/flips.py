"""Decisions float32 may take either way, ReLU and MaxPool: PyTorch float64 forward passes of Linear/Conv + ReLU
(+ MaxPool 2) chains that can take any of them the other way, for test_training_torch and test_artifacts_ort. Not
a test itself (CTest registers tests/test_*.py only).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from testlib import U32

# A ReLU whose input, or a 2x2 MaxPool whose two largest inputs, are closer than their float32 error can go either
# way in a correct float32 step, and the gradient then jumps by the unit's whole term. Measured: from the same
# weights, one ReLU input at 1e-8 of its layer's largest went the other way in otter's step (not in PyTorch
# float32's) and moved conv2's weight gradient by 6e-3 of its largest element. So the models built from
# Linear/Conv, ReLU and MaxPool run as an explicit chain of layers that can take any of these decisions the other
# way, and bounds each pre-activation's float32 error (forward running error: sqrt(K) U32 sum|w x| per layer, K
# its fan-in, plus its input's error carried through |W|). When otter's update is off its bound, the decisions
# within their error are flipped in the float64 reference, closest first, keeping a flip when it brings the
# reference nearer to otter (at most MAX_FLIPS of MAX_FLIP_TRIES candidates): a step passes only when a few such
# flips explain it exactly. (Summing every ambiguous decision's possible jump instead gives a vacuous bound: a CNN
# step has ~700 of them, and carried down through |W| they would allow conv1 1000x its largest gradient.)
MAX_FLIPS, MAX_FLIP_TRIES = 4, 12


def layer_chain(module):
    """[(kind, parameter name prefix, submodule)] of a Linear/Conv + ReLU (+ MaxPool 2) chain, None otherwise."""
    if hasattr(module, "conv3"):  # OtterCifarCNN and export_torch_models' cifar_cnn
        chain = []
        for c in ("conv1", "conv2", "conv3"):
            chain += [("lin", c, getattr(module, c)), ("relu", "", None), ("pool", "", None)]
        return chain + [("flatten", "", None), ("lin", "fc1", module.fc1), ("relu", "", None),
                        ("lin", "fc2", module.fc2)]
    if hasattr(module, "fc3"):  # OtterMnistDNN and export_torch_models' mnist_dnn
        return [("lin", "fc1", module.fc1), ("relu", "", None), ("lin", "fc2", module.fc2), ("relu", "", None),
                ("lin", "fc3", module.fc3)]
    return None


def lin(mod, x, weight, bias):
    if isinstance(mod, nn.Conv2d):
        return F.conv2d(x, weight, bias, stride=mod.stride, padding=mod.padding)
    return F.linear(x, weight, bias)


def windows(t):
    """[N, C, H, W] -> [N, C, H/2, W/2, 4]: the 2x2 MaxPool windows."""
    n, c, h, w = t.shape
    return t.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)


def chain_forward(chain, x, flips=()):
    """The chain's logits (float64, autograd), with the decisions in flips ((stage, flat index) pairs) taken the
    other way, and the ambiguous decisions as [(closeness = margin / error bound, stage, flat index)]. The error
    bounds add and multiply only absolute values, so float32 computes them well (and fast)."""
    ambiguous, h, err = [], x, torch.zeros(x.shape)
    for stage, (kind, name, mod) in enumerate(chain):
        flipped = [i for st, i in flips if st == stage]
        if kind == "lin":
            h2 = lin(mod, h, mod.weight, mod.bias)
            with torch.no_grad():  # sqrt(K) U32 (|W| |x| + |b|) + |W| err(x)
                scale = math.sqrt(mod.weight[0].numel()) * U32
                err = lin(mod, scale * h.abs().float() + err, mod.weight.abs().float(), scale * mod.bias.abs().float())
            h = h2
        elif kind == "relu":
            z = h.detach()
            on = (z > 0).reshape(-1)
            on[flipped] = ~on[flipped]
            h = h * on.reshape(z.shape).to(h.dtype)
            closeness = (z.abs() / err).reshape(-1)
            near = torch.nonzero(closeness <= 1).reshape(-1)
            ambiguous += [(float(closeness[i]), stage, int(i)) for i in near]
        elif kind == "pool":
            top, idx = windows(h.detach()).sort(-1, descending=True)
            e = windows(err).gather(-1, idx)
            closeness = ((top[..., 0] - top[..., 1]) / (e[..., 0] + e[..., 1])).reshape(-1)
            near = torch.nonzero((closeness <= 1) & (top[..., 0] > 0).reshape(-1)).reshape(-1)
            ambiguous += [(float(closeness[i]), stage, int(i)) for i in near]
            choice = idx[..., :1].clone(memory_format=torch.contiguous_format)
            runner_up = idx[..., 1:2].reshape(-1)
            choice.view(-1)[flipped] = runner_up[flipped]
            h = windows(h).gather(-1, choice).squeeze(-1)
            err = F.max_pool2d(err, 2)
        else:
            h, err = torch.flatten(h, 1), torch.flatten(err, 1)
    return h, sorted(ambiguous)
