#!/usr/bin/python3
"""Exports the PyTorch models otter's gradient and training tests use (tests/test_torch_grads.py,
tests/test_real_models.py) to ONNX.

    /usr/bin/python3 tools/export_torch_models.py OUTDIR [--model NAME ...] [--opset N] [--real]

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

Real architectures (REAL_MODELS, --real; always opset 17, 10 classes, every Dropout set to p = 0 so a training
step is deterministic and comparable with PyTorch's; real_input(name, batch, rng) makes an input batch):
  resnet18, mobilenet_v2, mobilenet_v3_small, efficientnet_b0 (stochastic depth 0), shufflenet_v2_x0_5,
  squeezenet1_0   torchvision's, on [batch, 3, 32, 32] images (--image-size)
  gru, lstm        text classifiers: int64 tokens [batch, 32] (vocabulary 100) -> Embedding 16 -> one GRU / LSTM
                   layer of 32 -> the last step's output -> Linear
  transformer_encoder  nn.TransformerEncoder (2 layers, d_model 32, 4 heads, feed-forward 64, batch_first) on
                   [batch, 32, 32] float inputs, mean over tokens, Linear
  embedding_mlp    int64 tokens [batch, 32] -> Embedding 16 -> flatten -> Linear 512->64, ReLU, Linear

Benchmark-only (BENCH_MODELS, bench/real_models.sh; not in the tests):
  encoder_d256     nn.TransformerEncoder of 4 layers, d_model 256, 4 heads, feed-forward 1024, on [batch, 128, 256]

--eval exports in inference form instead (TrainingMode.EVAL, constants folded, Dropout and BatchNorm in eval mode),
as a user exports for deployment.
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


class TextRNN(nn.Module):
    """Embedding -> one batch_first GRU or LSTM layer -> its output at the last step -> Linear."""

    def __init__(self, cell, vocab=100, dim=16, hidden=32, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell](dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out[:, -1])


class EncoderStack(nn.Module):
    """nn.TransformerEncoder (post-norm layers, ReLU feed-forward) -> mean over tokens -> Linear."""

    def __init__(self, dim=32, heads=4, hidden=64, layers=2, classes=10):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, heads, hidden, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


class EmbeddingMLP(nn.Module):
    def __init__(self, vocab=100, dim=16, tokens=32, hidden=64, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.fc1 = nn.Linear(tokens * dim, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, tokens):
        return self.fc2(F.relu(self.fc1(torch.flatten(self.embed(tokens), 1))))


VISION_MODELS = ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "shufflenet_v2_x0_5",
                 "squeezenet1_0"]
REAL_MODELS = VISION_MODELS + ["gru", "lstm", "transformer_encoder", "embedding_mlp"]
BENCH_MODELS = ["encoder_d256"]
BENCH_ENCODER = dict(dim=256, heads=4, hidden=1024, layers=4)
BENCH_TOKENS = 128
REAL_OPSET = 17
REAL_CLASSES = 10
IMAGE_SIZE = 32
TOKENS, VOCAB = 32, 100


def build_real_model(name):
    """The module for a REAL_MODELS name, initialized from SEED, every Dropout at p = 0."""
    torch.manual_seed(SEED)
    if name in VISION_MODELS:
        import torchvision
        kwargs = {"stochastic_depth_prob": 0.0} if name == "efficientnet_b0" else {}
        model = getattr(torchvision.models, name)(weights=None, num_classes=REAL_CLASSES, **kwargs)
    elif name in ("gru", "lstm"):
        model = TextRNN(name, VOCAB, classes=REAL_CLASSES)
    elif name == "transformer_encoder":
        model = EncoderStack(classes=REAL_CLASSES)
    elif name == "encoder_d256":
        model = EncoderStack(classes=REAL_CLASSES, **BENCH_ENCODER)
    elif name == "embedding_mlp":
        model = EmbeddingMLP(VOCAB, tokens=TOKENS, classes=REAL_CLASSES)
    else:
        raise KeyError(name)
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


def real_input(name, batch, rng, image_size=IMAGE_SIZE):
    """A random input batch for a REAL_MODELS name (numpy; rng a numpy Generator): float32 images or
    sequences, int64 token ids."""
    import numpy as np
    if name in VISION_MODELS:
        return rng.standard_normal((batch, 3, image_size, image_size)).astype(np.float32)
    if name == "transformer_encoder":
        return rng.standard_normal((batch, TOKENS, 32)).astype(np.float32)
    if name == "encoder_d256":
        return rng.standard_normal((batch, BENCH_TOKENS, BENCH_ENCODER["dim"])).astype(np.float32)
    return rng.integers(0, VOCAB, (batch, TOKENS)).astype(np.int64)


def export_real(name, path, image_size=IMAGE_SIZE, inference=False):
    """Export REAL_MODELS' (or BENCH_MODELS') `name` to `path` in training mode (opset 17, dynamic batch axis), or in
    inference form with `inference`; returns the module (in train() or eval() mode)."""
    import numpy as np
    model = build_real_model(name)
    model.train(not inference)
    x = torch.from_numpy(real_input(name, 2, np.random.default_rng(0), image_size))
    mode = torch.onnx.TrainingMode.EVAL if inference else torch.onnx.TrainingMode.TRAINING
    torch.onnx.export(model, (x,), path, export_params=True, do_constant_folding=inference,
                      training=mode, opset_version=REAL_OPSET,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return model


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--model", action="append", choices=MODELS + REAL_MODELS + BENCH_MODELS,
                    help="export only these (repeatable)")
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                    help="opset of MODELS (14 or 15; default %(default)s); REAL_MODELS are always opset 17")
    ap.add_argument("--real", action="store_true", help="without --model: export REAL_MODELS instead of MODELS")
    ap.add_argument("--image-size", type=int, default=IMAGE_SIZE, help="REAL_MODELS' image side (default %(default)s)")
    ap.add_argument("--eval", action="store_true", help="REAL_MODELS and BENCH_MODELS in inference form")
    args = ap.parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    for name in args.model or (REAL_MODELS if args.real else MODELS):
        path = os.path.join(args.outdir, name + ".onnx")
        real = name in REAL_MODELS + BENCH_MODELS
        if real:
            export_real(name, path, args.image_size, args.eval)
        else:
            export(name, path, args.opset)
        print(f"{path}: {os.path.getsize(path)} bytes, opset {REAL_OPSET if real else model_opset(name, args.opset)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
