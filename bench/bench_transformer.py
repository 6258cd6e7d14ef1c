#!/usr/bin/python3
"""Writes the transformer-encoder benchmark model for bench/bench_transformer.sh.

    bench_transformer.py OUT.onnx BATCH [--seq 128] [--dim 256] [--heads 4] [--layers 2] [--op OP]

Pre-norm encoder layers on x [BATCH, seq, dim]: RMSNormalization-23, Q/K/V projections,
RotaryEmbedding-23 on Q and K (3D packed heads, position_ids 0..seq-1), Attention-23 (3D packed,
q_num_heads = kv_num_heads = heads), output projection + residual; RMSNormalization, MatMul + bias,
Gelu-20 (tanh), MatMul + bias + residual. Static shapes; weights from a fixed seed. Built with
python3-onnx 1.12's helper, which predates opset 23: the opset import and IR version 10 are set by
hand and the 1.12 checker is not run.

--op OP writes one of the encoder's new operators alone on x instead, to time it without the matrix
products around it: attention (Attention(x, x, x)), causal_attention (is_causal=1), rms
(RMSNormalization), rotary (RotaryEmbedding), gelu (Gelu tanh).
"""
import argparse

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("batch", type=int)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--op", default="encoder",
                    choices=["encoder", "attention", "causal_attention", "rms", "rotary", "gelu"])
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    d, head, ff = a.dim, a.dim // a.heads, 4 * a.dim
    inits, nodes = [], []

    def weight(name, *shape, scale=None):
        s = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def const(name, array):
        inits.append(numpy_helper.from_array(array, name))
        return name

    inv_freq = 1.0 / (10000 ** (np.arange(0, head, 2) / head))
    angles = np.outer(np.arange(a.seq), inv_freq)
    if a.op in ("encoder", "rotary"):
        const("cos_cache", np.cos(angles).astype(np.float32))
        const("sin_cache", np.sin(angles).astype(np.float32))
        const("position_ids", np.tile(np.arange(a.seq, dtype=np.int64), (a.batch, 1)))

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    x = "input"
    single = {
        "attention": lambda: node("Attention", [x, x, x], "op", q_num_heads=a.heads, kv_num_heads=a.heads),
        "causal_attention": lambda: node("Attention", [x, x, x], "op", q_num_heads=a.heads,
                                         kv_num_heads=a.heads, is_causal=1),
        "rms": lambda: node("RMSNormalization", [x, const("scale", np.ones(d, np.float32))], "op", axis=-1,
                            epsilon=1e-6),
        "rotary": lambda: node("RotaryEmbedding", [x, "cos_cache", "sin_cache", "position_ids"], "op",
                               num_heads=a.heads),
        "gelu": lambda: node("Gelu", [x], "op", approximate="tanh"),
    }
    if a.op in single:
        single[a.op]()
    for layer in range(a.layers if a.op == "encoder" else 0):
        p = f"l{layer}."
        norm_scale = const(p + "norm1", np.ones(d, np.float32))
        h = node("RMSNormalization", [x, norm_scale], p + "rms1", axis=-1, epsilon=1e-6)
        q, k, v = (node("MatMul", [h, weight(p + w, d, d)], p + w + "_out") for w in ("wq", "wk", "wv"))
        rope = dict(num_heads=a.heads)
        q = node("RotaryEmbedding", [q, "cos_cache", "sin_cache", "position_ids"], p + "rope_q", **rope)
        k = node("RotaryEmbedding", [k, "cos_cache", "sin_cache", "position_ids"], p + "rope_k", **rope)
        att = node("Attention", [q, k, v], p + "attention", q_num_heads=a.heads, kv_num_heads=a.heads)
        o = node("MatMul", [att, weight(p + "wo", d, d)], p + "wo_out")
        x = node("Add", [x, o], p + "res1")
        h = node("RMSNormalization", [x, const(p + "norm2", np.ones(d, np.float32))], p + "rms2", axis=-1,
                 epsilon=1e-6)
        h = node("Add", [node("MatMul", [h, weight(p + "w1", d, ff)], p + "ff1"),
                         const(p + "b1", np.zeros(ff, np.float32))], p + "ff1_bias")
        h = node("Gelu", [h], p + "gelu", approximate="tanh")
        h = node("Add", [node("MatMul", [h, weight(p + "w2", ff, d)], p + "ff2"),
                         const(p + "b2", np.zeros(d, np.float32))], p + "ff2_bias")
        x = node("Add", [x, h], p + "res2")
    nodes[-1].output[0] = "output"
    graph = helper.make_graph(
        nodes, "transformer_encoder",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [a.batch, a.seq, d])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [a.batch, a.seq, d])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], producer_name="otter-bench")
    model.ir_version = 10
    with open(a.out, "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
