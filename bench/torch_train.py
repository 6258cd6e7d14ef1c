"""Training throughput of one model in PyTorch, for bench/bench_training.sh.

    /usr/bin/python3 bench/torch_train.py MODEL THREADS STEPS BATCH [IMAGE_SIZE]

MODEL is mnist_dnn or cifar_cnn (tools/export_torch_models.py's modules: the same layers as otter's
`otter models mnist-dnn|cifar10-cnn`) or one of its REAL_MODELS / BENCH_MODELS (images of IMAGE_SIZE, default 32;
token inputs as bench_training.c makes them). torch.set_num_threads(THREADS); synthetic data as bench_training.c
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


def peak_rss_kb():
    """VmHWM, which starts afresh at exec (ru_maxrss keeps the high-water mark of the process that forked us)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    model_name, threads, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    spec = importlib.util.spec_from_file_location("etm", os.path.join(HERE, "..", "tools", "export_torch_models.py"))
    etm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(etm)
    real = model_name in etm.REAL_MODELS + etm.BENCH_MODELS
    model = (etm.build_real_model(model_name) if real else etm.build_model(model_name)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ce = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    if real:
        import numpy as np
        image_size = int(sys.argv[5]) if len(sys.argv) > 5 else etm.IMAGE_SIZE
        sample = torch.from_numpy(etm.real_input(model_name, batch, np.random.default_rng(0), image_size))
        if sample.dtype == torch.int64:
            make = lambda: torch.randint(0, 97, tuple(sample.shape), generator=g)  # bench_util.h's BENCH_VOCAB
        else:
            make = lambda: torch.rand(tuple(sample.shape), generator=g)
    else:
        make = lambda: torch.rand(etm.input_shape(model_name, batch), generator=g)
    data = [(make(), torch.randint(0, 10, (batch,), generator=g)) for _ in range(4)]
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
                      "peak_rss_kb": peak_rss_kb()}))


if __name__ == "__main__":
    main()
