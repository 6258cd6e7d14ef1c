#!/usr/bin/env python3
"""Reference values of tests/test_fl_aggregate.c's test_adaptive: FedAdam and FedYogi, Reddi et al.,
"Adaptive Federated Optimization" (ICLR 2021), Algorithm 2, in numpy float64, as src/fl/aggregate.c's
server_step states them:

    delta = weighted mean of client vectors - x           (the pseudo-gradient; weights = example counts)
    m     = beta1 m + (1 - beta1) delta                    (m_{-1} = 0)
    FedAdam: v = beta2 v + (1 - beta2) delta^2
    FedYogi: v = v - (1 - beta2) delta^2 sign(v - delta^2)  (v_{-1} = tau^2)
    x     = x + lr m / (sqrt(v) + tau)

x is the global model, a float32 vector: it is rounded to float32 after each round, as otter stores it.
Round 1 aggregates the clients XA (1 example) and XB (3 examples) from X0; round 2 has every client send the
current global vector, so its delta is 0 and only the moments move the model.

Prints the four C arrays; paste them into test_adaptive:  python3 tools/fl_adaptive_reference.py
"""
import numpy as np

X0 = np.array([1, 2, 3, 4, 0.5, -0.5], np.float32)
XA = np.array([2, 2, 2, 2, 1, 1], np.float32)
XB = np.array([0, 4, 3, 8, 0.5, -1.5], np.float32)
LR, BETA1, BETA2, TAU = 0.1, 0.9, 0.99, 1e-3


def rounds(yogi):
    x = X0.copy()
    m = np.zeros(x.size)
    v = np.full(x.size, TAU * TAU)
    out = []
    for clients in (((XA, 1), (XB, 3)), "same"):
        if clients == "same":
            clients = ((x, 2), (x, 5))
        mean = sum(n * c.astype(np.float64) for c, n in clients) / sum(n for _, n in clients)
        delta = mean - x.astype(np.float64)
        m = BETA1 * m + (1 - BETA1) * delta
        d2 = delta * delta
        v = v - (1 - BETA2) * d2 * np.sign(v - d2) if yogi else BETA2 * v + (1 - BETA2) * d2
        x = (x.astype(np.float64) + LR * m / (np.sqrt(v) + TAU)).astype(np.float32)
        out.append(x.copy())
    return out


def c_array(name, values):
    return f"static const double {name}[6] = {{" + ", ".join(f"{float(e):.9g}" for e in values) + "};"


if __name__ == "__main__":
    for kind, yogi in (("adam", False), ("yogi", True)):
        for r, x in enumerate(rounds(yogi), 1):
            print(c_array(f"{kind}{r}", x))
