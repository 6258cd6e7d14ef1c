#!/usr/bin/python3
"""Speed and memory on real architectures: otter against onnxruntime-node (inference) and PyTorch (training).
Run through bench/real_models.sh, which builds the drivers and installs onnxruntime-node.

    /usr/bin/python3 bench/real_models.py BUILD_DIR NPM_PREFIX [--rounds N] [--model NAME ...]
                                          [--no-infer] [--no-train] [--image-size S] [--cpu K]

Models: tools/export_torch_models.py's vision models on 3xSxS images (S = 64), its GRU and LSTM text classifiers
(32 tokens) and encoder_d256 (4 layers, d_model 256, 128 tokens). Inference: the model exported in inference form
(TrainingMode.EVAL), batch 1 and 32, 1 and 2 threads, bench_runtime (otter, opt level 2) against ort_infer.js
(graphOptimizationLevel "all"). Training: the model exported in training form, `otter artifacts` with
CrossEntropyLoss and AdamW, batch 32, 1 and 2 threads, bench_training (train step + optimizer step + reset)
against torch_train.py (zero_grad, forward, loss, backward, torch.optim.AdamW step).

Each configuration alternates the two sides ROUNDS times (the VM's speed drifts within minutes) and reports the
median of the rounds' medians, the ratio peer / otter (> 1: otter faster), the ratio of the fastest single runs,
and each side's peak RSS. One-thread rows pin both sides to one CPU (--cpu). Not a test: timings depend on the
machine and its load.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import export_torch_models as etm  # noqa: E402

MODELS = ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "shufflenet_v2_x0_5",
          "squeezenet1_0", "gru", "lstm", "encoder_d256"]
PY = "/usr/bin/python3"
BUDGET_MS = 1500  # time one side spends per round and configuration, so a row takes about 2 x ROUNDS x this


def run_json(cmd, cpus=None):
    """Runs cmd (on the CPUs in cpus only, when given) and returns the JSON its last line prints."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def sample(name, image_size):
    """(element type, per-sample dims) of a model's input."""
    import numpy as np
    x = etm.real_input(name, 1, np.random.default_rng(0), image_size)
    return ("int64" if x.dtype == np.int64 else "float32"), list(x.shape[1:])


def prepare(args, name):
    """Exports both forms and makes the training artifacts once (kept in BUILD/bench/real); returns their paths."""
    out = os.path.join(args.build, "bench", "real", f"s{args.image_size}")
    infer, train, art = (os.path.join(out, d) for d in ("infer", "train", "artifacts"))
    for d in (infer, train):
        os.makedirs(d, exist_ok=True)
    inf_path, train_path, art_dir = os.path.join(infer, name + ".onnx"), os.path.join(train, name + ".onnx"), \
        os.path.join(art, name)
    if not os.path.exists(inf_path):
        etm.export_real(name, inf_path, args.image_size, inference=True)
    if not os.path.exists(train_path):
        etm.export_real(name, train_path, args.image_size)
    if not os.path.exists(os.path.join(art_dir, "checkpoint")):
        subprocess.run([os.path.join(args.build, "otter"), "artifacts", train_path, "-o", art_dir, "--loss",
                        "CrossEntropyLoss", "--optimizer", "AdamW"], check=True, capture_output=True)
    return inf_path, art_dir


def pinned(args, threads):
    """The CPUs a row's runs may use: one-thread rows run both sides on the same CPU (args.cpu), as a VM's
    CPUs can differ by a third in speed (one sharing its core with a busy neighbour) and the scheduler
    would otherwise deal each process a CPU at random; other rows run on every CPU."""
    return {args.cpu} if threads == 1 else None


def runs_per_call(first_ms, cap):
    """Runs (or steps) per call so that one call takes about BUDGET_MS, from a first measurement."""
    return max(3, min(cap, int(BUDGET_MS / max(first_ms, 1e-3))))


def report(kind, name, batch, threads, peer, otter_runs, peer_runs):
    med_o = statistics.median(r["median_ms"] for r in otter_runs)
    med_p = statistics.median(r["median_ms"] for r in peer_runs)
    min_o = min(r["min_ms"] for r in otter_runs)
    min_p = min(r["min_ms"] for r in peer_runs)
    rss_o = max(r["peak_rss_kb"] for r in otter_runs) / 1024
    rss_p = max(r["peak_rss_kb"] for r in peer_runs) / 1024
    print(f"{kind:<6} {name:<19} {batch:>5} {threads:>7} {med_p:10.2f} {med_o:10.2f} {med_p / med_o:7.2f} "
          f"{min_p / min_o:7.2f} {rss_o:9.1f} {rss_p:9.1f} {rss_o / rss_p:7.2f}  {peer}", flush=True)
    return {"kind": kind, "model": name, "batch": batch, "threads": threads, "ratio": med_p / med_o,
            "rss_ratio": rss_o / rss_p}


def bench_infer(args, name, path):
    dtype, dims = sample(name, args.image_size)
    rows = []
    for batch in (1, 32):
        for threads in (1, 2):
            cpus = pinned(args, threads)
            probe = run_json([os.path.join(args.build, "bench", "bench_runtime"), path, str(batch), str(threads), "3"],
                             cpus)
            runs = runs_per_call(probe["median_ms"], 500)
            o, p = [], []
            for _ in range(args.rounds):
                p.append(run_json(["node", os.path.join(HERE, "ort_infer.js"), args.npm, path, str(batch),
                                   str(threads), str(runs), dtype, ",".join(map(str, dims))], cpus))
                o.append(run_json([os.path.join(args.build, "bench", "bench_runtime"), path, str(batch), str(threads),
                                   str(runs)], cpus))
            rows.append(report("infer", name, batch, threads, "onnxruntime-node", o, p))
    return rows


def bench_train(args, name, art_dir):
    _, dims = sample(name, args.image_size)
    batch, rows = 32, []
    for threads in (1, 2):
        cmd = [os.path.join(args.build, "bench", "bench_training"), art_dir, str(threads)]
        cpus = pinned(args, threads)
        probe = run_json(cmd + ["2", str(batch)] + [str(d) for d in dims], cpus)
        steps = runs_per_call(probe["median_ms"], 50)
        o, p = [], []
        for _ in range(args.rounds):
            p.append(run_json([PY, os.path.join(HERE, "torch_train.py"), name, str(threads), str(steps), str(batch),
                               str(args.image_size)], cpus))
            o.append(run_json(cmd + [str(steps), str(batch)] + [str(d) for d in dims], cpus))
        rows.append(report("train", name, batch, threads, "PyTorch", o, p))
    return rows


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("npm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", action="append", choices=MODELS)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--no-infer", action="store_true")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                    help="the CPU both sides' one-thread runs share (default: the last this process may use)")
    args = ap.parse_args(argv)
    import torch
    ort_version = json.load(open(os.path.join(args.npm, "node_modules", "onnxruntime-node", "package.json")))["version"]
    print(f"otter vs onnxruntime-node {ort_version} (inference) and PyTorch {torch.__version__} (training); "
          f"images 3x{args.image_size}x{args.image_size}")
    print(f"ratio = peer ms / otter ms (> 1: otter faster), median of {args.rounds} alternating rounds; "
          f"min = fastest single runs; RSS in MB")
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]} on {os.cpu_count()} cores; "
          f"one-thread rows run both sides on CPU {args.cpu}")
    print(f"{'kind':<6} {'model':<19} {'batch':>5} {'threads':>7} {'peer ms':>10} {'otter ms':>10} {'ratio':>7} "
          f"{'min':>7} {'otter MB':>9} {'peer MB':>9} {'RSS o/p':>7}  peer", flush=True)
    rows = []
    for name in args.model or MODELS:
        inf_path, art_dir = prepare(args, name)
        if not args.no_infer:
            rows += bench_infer(args, name, inf_path)
        if not args.no_train:
            rows += bench_train(args, name, art_dir)
    for kind in ("infer", "train"):
        for threads in (1, 2):
            r = [x["ratio"] for x in rows if x["kind"] == kind and x["threads"] == threads]
            if r:
                print(f"{kind} at {threads} thread(s): ratio min {min(r):.2f}, median {statistics.median(r):.2f} "
                      f"over {len(r)} rows")
    rss = [x["rss_ratio"] for x in rows if x["kind"] == "train"]
    if rss:
        print(f"training peak RSS otter / PyTorch: max {max(rss):.2f}, median {statistics.median(rss):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
