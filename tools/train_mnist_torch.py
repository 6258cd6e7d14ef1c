"""The recipe of tools/train-mnist.sh in PyTorch, as the reference for otter's accuracy numbers.

    /usr/bin/python3 tools/train_mnist_torch.py DATA_DIR [--epochs 5] [--batch 64] [--lr 1e-3] [--seed 0]
        [--adamw torch|tool] [--normalize scale|standard] [--schedule constant|linear|cosine] [--threads 2]

DATA_DIR holds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (MNIST or Fashion-MNIST). Same as otter train:
inputs x / 255 flattened to 784 (--normalize standard: then minus the training set's pixel mean and divided by
its std, both rounded to 4 digits: 0.1307/0.3081 for MNIST and 0.2860/0.3530 for Fashion-MNIST, otter's
constants), the MNIST DNN 784-200-200-10 with PyTorch's default init (torch.manual_seed(seed)), a new random
order every epoch (torch.randperm), the last partial batch kept, CrossEntropyLoss (mean), test accuracy after
every epoch. --adamw torch: torch.optim.AdamW defaults (eps 1e-8, weight_decay 0.01); --adamw tool: the update
ORT's Python tool writes (adam_mode 1: bias correction folded into the step size, eps 1e-6 added to sqrt(v),
weight_decay 0), coded here from the spec's formula. --schedule: optimizer step k (from 0) of T uses
lr * (T - k) / T (linear: ORT's LinearLRScheduler without warm-up) or lr * (1 + cos(pi * k / T)) / 2 (cosine),
as otter train --schedule linear|cosine does.
"""
import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            raw = open(p, "rb").read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            nd = raw[3]
            dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
            return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)
    raise FileNotFoundError(path)


class MnistDNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 200), nn.Linear(200, 200), nn.Linear(200, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class AdamWMode1(torch.optim.Optimizer):
    """com.microsoft AdamWOptimizer with adam_mode 1 (HF AdamW), as ORT's Python tool configures it."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            a, b = g["betas"]
            for p in g["params"]:
                st = self.state[p]
                if not st:
                    st["t"], st["m"], st["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                st["t"] += 1
                t, m, v = st["t"], st["m"], st["v"]
                m.mul_(a).add_(p.grad, alpha=1 - a)
                v.mul_(b).addcmul_(p.grad, p.grad, value=1 - b)
                step = g["lr"] * (1 - b ** t) ** 0.5 / (1 - a ** t)
                p.addcdiv_(m, v.sqrt().add_(g["eps"]), value=-step)
                if g["weight_decay"]:
                    p.mul_(1 - g["lr"] * g["weight_decay"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--adamw", choices=["torch", "tool"], default="torch")
    ap.add_argument("--normalize", choices=["scale", "standard"], default="scale")
    ap.add_argument("--schedule", choices=["constant", "linear", "cosine"], default="constant")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr = torch.from_numpy(idx(os.path.join(a.data, "train-images-idx3-ubyte")).reshape(-1, 784).astype(np.float32) / 255)
    ytr = torch.from_numpy(idx(os.path.join(a.data, "train-labels-idx1-ubyte")).astype(np.int64))
    xte = torch.from_numpy(idx(os.path.join(a.data, "t10k-images-idx3-ubyte")).reshape(-1, 784).astype(np.float32) / 255)
    yte = torch.from_numpy(idx(os.path.join(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    if a.normalize == "standard":
        mean, std = round(float(xtr.mean()), 4), round(float(xtr.std()), 4)
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    model = MnistDNN()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr) if a.adamw == "torch" else AdamWMode1(model.parameters(), lr=a.lr)
    total = a.epochs * ((len(xtr) + a.batch - 1) // a.batch)
    sched = None
    if a.schedule == "linear":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: max(0.0, (total - k) / total))
    elif a.schedule == "cosine":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.5 * (1 + math.cos(math.pi * min(k, total) / total)))
    t0 = time.time()
    for ep in range(a.epochs):
        model.train()
        perm = torch.randperm(len(xtr))
        tot = 0.0
        for i in range(0, len(xtr), a.batch):
            j = perm[i:i + a.batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(xtr[j]), ytr[j])
            loss.backward()
            opt.step()
            if sched:
                sched.step()
            tot += float(loss) * len(j)
        model.eval()
        with torch.no_grad():
            out = model(xte)
            acc = float((out.argmax(1) == yte).float().mean())
            el = float(F.cross_entropy(out, yte))
        print(f"epoch {ep + 1}: train loss {tot / len(xtr):.6f} eval loss {el:.6f} eval acc {100 * acc:.2f}% "
              f"({time.time() - t0:.1f}s)", flush=True)
    print(f"final test accuracy {100 * acc:.2f}% [torch, AdamW {a.adamw}, seed {a.seed}, {a.epochs} epochs, "
          f"{a.normalize}, {a.schedule}]")


if __name__ == "__main__":
    main()
