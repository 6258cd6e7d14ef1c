"""otter fl simulate end to end on a small synthetic classification task (npy data, the MNIST DNN, SGD).

- FedAvg with every client each round, one local epoch and a batch larger than any client is one full-batch
  SGD step on the union of the clients' data (sum_i n_i (w - lr g_i) / n = w - lr g): 3 rounds over a
  lopsided Dirichlet partition of 3 clients equal 3 epochs of `otter train` with one batch (max relative
  difference of the weights <= 1e-5). Weighting clients equally instead of by examples fails this.
- fedavgm:lr=1,momentum=0 gives the same weights as fedavg;
- the same seed twice gives the same per-round table (times aside) and byte-identical checkpoints;
- `otter eval` of the saved checkpoint prints the last round's eval loss; the task is learned (> 80%);
- --target-accuracy stops at the first round reaching it; median and trimmed-mean run; --plot writes the
  loss and accuracy curves per round;
- bad --partition / --strategy / --fraction are usage errors (exit 2) naming the option.
"""
import csv
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check, otter  # noqa: E402

WORK = tl.work_dir("fl_simulate")


def w(*p):
    return os.path.join(WORK, *p)


def params(ckpt):
    d = w("dump_" + os.path.basename(ckpt))
    shutil.rmtree(d, ignore_errors=True)
    r = otter("checkpoint", "dump", ckpt, "--npy-dir", d)
    if r.returncode != 0:
        return {}
    man = json.load(open(os.path.join(d, "manifest.json")))
    return {k: np.load(os.path.join(d, v["file"])) for k, v in man.items() if v.get("kind", "") != "momentum" and "/" not in k}


def rel_diff(a, b):
    if not a or a.keys() != b.keys():
        return float("inf")
    return max(float(np.max(np.abs(a[k] - b[k])) / max(np.max(np.abs(b[k])), 1e-30)) for k in a)


def rows(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f)]


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 1, (10, 784)).astype(np.float32)

    def make(n, seed):
        r = np.random.default_rng(seed)
        y = r.integers(0, 10, n)
        x = (centers[y] + r.normal(0, 4.0, (n, 784))).astype(np.float32)
        return x, y.astype(np.int64)

    x, y = make(600, 1)
    xe, ye = make(300, 2)
    for name, a in [("x", x), ("y", y), ("xe", xe), ("ye", ye)]:
        np.save(w(name + ".npy"), a)
    data, edata = f"npy:{w('x.npy')},{w('y.npy')}", f"npy:{w('xe.npy')},{w('ye.npy')}"
    check(otter("models", "mnist-dnn", "-o", w("m.onnx"), "--seed", "1").returncode == 0, "models")
    check(otter("artifacts", w("m.onnx"), "-o", w("art"), "--optimizer", "SGD", "--additional-output",
                "output").returncode == 0, "artifacts (SGD)")

    # FedAvg, all clients, E = 1, one batch per client == full-batch SGD on all the data.
    sim = ["fl", "simulate", "--artifacts", w("art"), "--data", data, "--clients", "3", "--fraction", "1",
           "--local-epochs", "1", "--batch-size", "1000", "--rounds", "3", "--lr", "0.05", "--threads", "1"]
    r = otter(*sim, "--partition", "dirichlet:0.5", "--seed", "3", "--save", w("fedsgd.ckpt"))
    check(r.returncode == 0, "simulate 3 clients, dirichlet:0.5, full batches")
    sizes = r.stdout.split("clients (dirichlet:0.5, ")[1].split(" each")[0] if "dirichlet:0.5, " in r.stdout else ""
    print(f"client sizes: {sizes}")
    check(otter("train", w("art"), "--data", data, "--batch-size", "1000", "--epochs", "3", "--lr", "0.05",
                "--no-shuffle", "--threads", "1", "--save", w("central.ckpt")).returncode == 0,
          "train 3 full-batch epochs")
    d = rel_diff(params(w("fedsgd.ckpt")), params(w("central.ckpt")))
    print(f"FedAvg(E=1, B=inf, weighted by examples) vs centralized full-batch SGD: max rel diff {d:.3g}")
    check(d <= 1e-5, "3 FedAvg rounds == 3 full-batch SGD steps")

    r = otter(*sim, "--partition", "dirichlet:0.5", "--seed", "3", "--strategy", "fedavgm:lr=1,momentum=0",
              "--save", w("fedavgm0.ckpt"))
    d = rel_diff(params(w("fedavgm0.ckpt")), params(w("fedsgd.ckpt")))
    check(r.returncode == 0 and d == 0, f"fedavgm momentum 0 == fedavg (max rel diff {d:.3g})")

    # A real run: 10 clients, 3 per round, B = 20, twice with the same seed.
    run = ["fl", "simulate", "--artifacts", w("art"), "--data", data, "--eval-data", edata, "--clients", "10",
           "--fraction", "0.3", "--local-epochs", "2", "--batch-size", "20", "--rounds", "6", "--lr", "0.05",
           "--seed", "7", "--threads", "1"]
    r1 = otter(*run, "--csv", w("a.csv"), "--save", w("a.ckpt"), "--plot", w("a.svg"))
    r2 = otter(*run, "--csv", w("b.csv"), "--save", w("b.ckpt"))
    check(r1.returncode == 0 and r2.returncode == 0, "simulate 10 clients x 6 rounds, twice")
    ra, rb = rows(w("a.csv")), rows(w("b.csv"))
    key = lambda rs: [(q["round"], q["clients"], q["examples"], q["train_loss"], q["eval_loss"], q["eval_accuracy"])
                      for q in rs]
    check(len(ra) == 6 and key(ra) == key(rb), "same seed: same per-round table")
    check(open(w("a.ckpt"), "rb").read() == open(w("b.ckpt"), "rb").read(), "same seed: byte-identical checkpoint")
    check(all(q["clients"] == "3" and q["examples"] == "180" for q in ra), "3 clients of 60 examples per round")
    try:
        svg = ET.parse(w("a.svg")).getroot()
        cls = lambda c: [e.text for e in svg.iter() if e.get("class") == c]
        polys = [e for e in svg.iter() if e.tag.endswith("polyline")]
        check(len(polys) == 2 and cls("xtick") == ["1", "2", "3", "4", "5", "6"] and len(cls("rtick")) >= 3,
              f"--plot: loss and accuracy curves, rounds 1..6 on the x axis, an accuracy axis {cls('rtick')}")
    except Exception as e:  # noqa: BLE001
        check(False, f"--plot SVG: {e}")
    acc = float(ra[-1]["eval_accuracy"])
    check(acc > 0.8, f"learned: final eval accuracy {acc:.3f} > 0.8")
    check(float(ra[-1]["eval_loss"]) < float(ra[0]["eval_loss"]), "eval loss falls")
    e = otter("eval", w("art"), "--data", edata, "--checkpoint", w("a.ckpt"))
    last = f"{float(ra[-1]['eval_loss']):.6f}"
    check(e.returncode == 0 and last in e.stdout, f"otter eval on the saved checkpoint prints loss {last}")
    r3 = otter(*run, "--seed", "8", "--csv", w("c.csv"))
    check(r3.returncode == 0 and key(rows(w("c.csv"))) != key(ra), "another seed: another run")

    # --target-accuracy
    r = otter(*run, "--target-accuracy", "0.5", "--csv", w("t.csv"))
    rt = rows(w("t.csv"))
    first = next((i + 1 for i, q in enumerate(ra) if float(q["eval_accuracy"]) >= 0.5), None)
    check(r.returncode == 0 and first is not None and len(rt) == first and
          f"reached at round {first}" in r.stdout, f"--target-accuracy 0.5 stops at round {first}")

    for strat in ["median", "trimmed-mean:fraction=0.34", "fedadam:lr=0.01", "fedyogi:lr=0.01"]:
        r = otter(*run, "--strategy", strat, "--rounds", "3", "--csv", w("s.csv"))
        rs = rows(w("s.csv")) if r.returncode == 0 else []
        check(r.returncode == 0 and len(rs) == 3 and all(np.isfinite(float(q["eval_loss"])) for q in rs),
              f"strategy {strat} runs 3 rounds")

    for bad, needle in [(["--partition", "shards:x"], "--partition"), (["--strategy", "fedprox"], "fedprox"),
                        (["--fraction", "1.5"], "--fraction"), (["--strategy", "median:lr=1"], "lr")]:
        r = otter(*run, *bad)
        check(r.returncode == 2 and needle in r.stderr, f"{' '.join(bad)}: usage error naming it")
    r = otter("fl", "simulate", "--artifacts", w("nope"), "--data", data)
    check(r.returncode == 1 and "nope" in r.stderr, "missing artifacts folder named")
    r = otter("fl", "frobnicate")
    check(r.returncode == 2 and "frobnicate" in r.stderr, "unknown fl sub-verb")

    return tl.finish("test_fl_simulate")


if __name__ == "__main__":
    sys.exit(main())
