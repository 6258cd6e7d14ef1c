"""Training throughput of one model in PyTorch, for bench/bench_training.sh.

    /usr/bin/python3 bench/torch_train.py MODEL THREADS STEPS BATCH

MODEL is mnist_dnn or cifar_cnn (tools/export_torch_models.py's modules: the same layers as otter's
`otter models mnist-dnn|cifar10-cnn`). torch.set_num_threads(THREADS); synthetic data as bench_training.c
(4 batches of uniform [0, 1) inputs, random labels in [0, 10), cycled); each step zero_grad, forward,
CrossEntropyLoss, backward, torch.optim.AdamW step. 3 warm-up steps, then STEPS timed steps.
Prints one JSON line: samples/s from the median step, median/min/mean ms, final loss, peak RSS (getrusage).
"""
import importlib.util
import json
import os
import resource
import sys
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    model_name, threads, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    spec = importlib.util.spec_from_file_location("etm", os.path.join(HERE, "..", "tools", "export_torch_models.py"))
    etm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(etm)
    model = etm.build_model(model_name).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ce = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    shape = etm.input_shape(model_name, batch)
    data = [(torch.rand(shape, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(4)]
    ms = []
    for k in range(3 + steps):
        x, y = data[k % 4]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = ce(model(x), y)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        if k >= 3:
            ms.append((t1 - t0) * 1e3)
    mean = sum(ms) / len(ms)
    ms.sort()
    med = ms[len(ms) // 2]
    print(json.dumps({"samples_per_s": 1e3 * batch / med, "median_ms": med, "min_ms": ms[0], "mean_ms": mean,
                      "loss": float(loss), "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
