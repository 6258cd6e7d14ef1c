#!/usr/bin/python3
"""Exports the PyTorch models otter's gradient tests use (tests/test_torch_grads.py) to ONNX.

    /usr/bin/python3 tools/export_torch_models.py OUTDIR [--model NAME ...] [--opset N]

Every model is exported with torch.onnx.export(..., export_params=True, do_constant_folding=False,
training=TrainingMode.TRAINING) and a dynamic batch axis, as the seeds export them. Weights come
from torch.manual_seed(SEED) and PyTorch's default initialization, so the same script and the same
torch give the same files. Writes OUTDIR/<name>.onnx for each model.

Models (build_model(name) returns the nn.Module, input_shape(name, batch) its input shape):
  mnist_dnn        784-200-200-10, Linear + ReLU (the seeds' MNIST DNN)
  cifar_cnn        Conv 3->32->64->128 3x3 pad 1, ReLU + MaxPool 2 each, Linear 2048->512->10 (the seeds' CIFAR-10 CNN)
  bn_dropout_cnn   small CNN with BatchNorm2d and Dropout (p = 0.5); bn_dropout_cnn_p0 is the same with p = 0
  transformer      one pre-norm encoder layer (LayerNorm, 2-head attention via MatMul + Softmax, GELU MLP)
                   on [batch, 6, 16] inputs, mean over tokens, Linear to 10 classes; GELU exports as the Erf
                   pattern. At opset < 17 LayerNorm is exported decomposed (ReduceMean, Sub, Pow, Sqrt, Div);
                   transformer_ln17 is exported at opset 17, where it is one LayerNormalization node.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 20240611
DEFAULT_OPSET = 15


class MnistDNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 200)
        self.fc2 = nn.Linear(200, 200)
        self.fc3 = nn.Linear(200, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CifarCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc1 = nn.Linear(128 * 4 * 4, 512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


class BnDropoutCNN(nn.Module):
    """Conv-BN-ReLU-MaxPool twice, Dropout, Linear-ReLU, Dropout, Linear on 3x12x12 inputs."""

    def __init__(self, p=0.5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop1 = nn.Dropout(p)
        self.fc1 = nn.Linear(16 * 3 * 3, 32)
        self.drop2 = nn.Dropout(p)
        self.fc2 = nn.Linear(32, 10)
        # Non-trivial BN affine parameters, so their gradients are not the identity case.
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = self.drop1(torch.flatten(x, 1))
        x = self.drop2(F.relu(self.fc1(x)))
        return self.fc2(x)


class EncoderClassifier(nn.Module):
    """Pre-norm transformer encoder layer written with plain ops, so attention exports as
    MatMul + Softmax: x + Attn(LN(x)), then x + MLP(LN(x)) with GELU (erf form)."""

    def __init__(self, dim=16, heads=2, hidden=32, classes=10):
        super().__init__()
        self.dim, self.heads = dim, heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.head = nn.Linear(dim, classes)
        with torch.no_grad():
            for ln in (self.ln1, self.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        b, t, d = x.shape
        h, hd = self.heads, self.dim // self.heads
        y = self.ln1(x)
        q, k, v = self.qkv(y).split(self.dim, dim=-1)
        q = q.reshape(b, t, h, hd).transpose(1, 2)
        k = k.reshape(b, t, h, hd).transpose(1, 2)
        v = v.reshape(b, t, h, hd).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(dim=1))


MODELS = ["mnist_dnn", "cifar_cnn", "bn_dropout_cnn", "bn_dropout_cnn_p0", "transformer", "transformer_ln17"]


def build_model(name):
    """The module for `name`, initialized from SEED (the same weights every time)."""
    torch.manual_seed(SEED)
    if name == "mnist_dnn":
        return MnistDNN()
    if name == "cifar_cnn":
        return CifarCNN()
    if name == "bn_dropout_cnn":
        return BnDropoutCNN(0.5)
    if name == "bn_dropout_cnn_p0":
        return BnDropoutCNN(0.0)
    if name in ("transformer", "transformer_ln17"):
        return EncoderClassifier()
    raise KeyError(name)


def input_shape(name, batch):
    return {
        "mnist_dnn": (batch, 784),
        "cifar_cnn": (batch, 3, 32, 32),
        "bn_dropout_cnn": (batch, 3, 12, 12),
        "bn_dropout_cnn_p0": (batch, 3, 12, 12),
        "transformer": (batch, 6, 16),
        "transformer_ln17": (batch, 6, 16),
    }[name]


def model_opset(name, opset=DEFAULT_OPSET):
    return 17 if name == "transformer_ln17" else opset


def export(name, path, opset=DEFAULT_OPSET):
    """Export model `name` to `path` in training mode; returns the module (in train() mode)."""
    model = build_model(name)
    model.train()
    x = torch.randn(*input_shape(name, 2))
    torch.onnx.export(model, (x,), path, export_params=True, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING, opset_version=model_opset(name, opset),
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return model


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--model", action="append", choices=MODELS, help="export only these (repeatable)")
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="opset (14 or 15; default %(default)s)")
    args = ap.parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    for name in args.model or MODELS:
        path = os.path.join(args.outdir, name + ".onnx")
        export(name, path, args.opset)
        print(f"{path}: {os.path.getsize(path)} bytes, opset {model_opset(name, args.opset)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
