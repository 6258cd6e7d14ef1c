"""otter_onnx.graph, the sclblonnx drop-in: the Nx guide's add-scalars example and a merge example with only
the import line changed, and each function's semantics (round trips, clean, check with otter's messages,
run, display, merge/concat/join/split). Skips (77) only when onnx or numpy is missing."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

try:
    import numpy as np
    import onnx
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(tl.SRC, "python"))
os.environ.setdefault("OTTER_LIB", tl.LIB)
import otter_onnx.graph as so  # noqa: E402  (the guide's `import sclblonnx as so`)

work = tl.work_dir("test_python_graph")
os.makedirs(work, exist_ok=True)
os.chdir(work)


def add_scalars_guide():
    """The Nx guide's example, its lines unchanged apart from the import above (display writes an SVG)."""
    g = so.empty_graph()
    n1 = so.node('Add', inputs=['x1', 'x2'], outputs=['sum'])
    g = so.add_node(g, n1)
    g = so.add_input(g, 'x1', "FLOAT", [1])
    g = so.add_input(g, 'x2', "FLOAT", [1])
    g = so.add_output(g, 'sum', "FLOAT", [1])
    checked = so.check(g)
    g = so.clean(g)
    shown = so.display(g)
    example = {"x1": np.array([1.2]).astype(np.float32), "x2": np.array([2.5]).astype(np.float32)}
    result = so.run(g,
                    inputs=example,
                    outputs=["sum"]
                    )
    print(result)
    stored = so.graph_to_file(g, "onnx/add-scalars.onnx")
    return g, checked, shown, result, stored


g, checked, shown, result, stored = add_scalars_guide()
tl.check(isinstance(g, onnx.GraphProto), "graphs are onnx.GraphProto")
tl.check(checked is True, "check() accepts the add-scalars graph")
tl.check(shown and open(shown).read().lstrip().startswith("<?xml") and "<svg" in open(shown).read(),
         "display() writes an SVG through graphviz")
tl.check(isinstance(result, list) and len(result) == 1 and result[0].dtype == np.float32
         and np.allclose(result[0], [3.7]), f"run() gives [3.7] for 1.2 + 2.5 (got {result})")
tl.check(stored is True and os.path.exists("onnx/add-scalars.onnx"), "graph_to_file() stores the model")
loaded = so.graph_from_file("onnx/add-scalars.onnx")
tl.check(loaded == g, "graph_from_file() reads back the same graph")
onnx.checker.check_model(onnx.load("onnx/add-scalars.onnx"))
tl.check(so.graph_from_file("onnx/missing.onnx") is False, "graph_from_file() of a missing file is False")

# ---- the guide's merge: preprocessing graph g1 feeding g2 ----------------------------------------------
g1 = so.empty_graph("g1")
g1 = so.add_node(g1, so.node("Add", inputs=["x1", "x2"], outputs=["sum"]))
g1 = so.add_input(g1, "x1", "FLOAT", [1])
g1 = so.add_input(g1, "x2", "FLOAT", [1])
g1 = so.add_output(g1, "sum", "FLOAT", [1])
g1 = so.add_output(g1, "copy", "FLOAT", [1])
g1 = so.add_node(g1, so.node("Identity", inputs=["x1"], outputs=["copy"]))
g2 = so.empty_graph("g2")
g2 = so.add_constant(g2, "two", np.array([2.0]), "FLOAT")
g2 = so.add_node(g2, so.node("Mul", inputs=["in", "two"], outputs=["out"]))
g2 = so.add_input(g2, "in", "FLOAT", [1])
g2 = so.add_output(g2, "out", "FLOAT", [1])
feeds = {"x1": np.array([1.2], np.float32), "x2": np.array([2.5], np.float32)}
merged = so.merge(g1, g2, outputs=["sum"], inputs=["in"])
tl.check(merged is not False and [i.name for i in merged.input] == ["x1", "x2"]
         and [o.name for o in merged.output] == ["out", "copy"],
         "merge() wires sum into in: inputs x1, x2; outputs g2's then g1's unwired ones")
tl.check(all(n.name.endswith(("_sg1", "_sg2")) for n in merged.node), "merge() postfixes node names _sg1/_sg2")
out = so.run(merged, feeds, ["out", "copy"])
tl.check(out is not False and np.allclose(out[0], [7.4]) and np.allclose(out[1], [1.2]),
         f"the merged graph computes (1.2 + 2.5) * 2 = 7.4 and passes x1 through (got {out})")
same = so.merge(g1, g2, io_match=[("sum", "in")])
tl.check(same == merged, "merge() with io_match equals merge() with outputs/inputs")
tl.check(len(g1.node) == 2 and len(g2.input) == 1, "merge() leaves its arguments unchanged")
g2_int = so.replace_input(so.graph_from_file("onnx/add-scalars.onnx"), "x1", "INT64", [1])
tl.check(so.merge(g1, g2_int, outputs=["sum"], inputs=["x1"]) is False,
         "merge() refuses wiring a FLOAT output into an INT64 input")
tl.check(so.merge(g1, g2, outputs=["sum"], inputs=[]) is False, "merge() refuses unequal outputs/inputs lists")

cat = so.concat(g1, g2, io_match=[("sum", "in")])
tl.check(cat is not False and so.check(cat) and np.allclose(so.run(cat, feeds, ["out"])[0], [7.4]),
         "concat() with io_match pastes g2 after g1 (7.4)")
side = so.concat(g1, g2, complete=False)
tl.check([i.name for i in side.input] == ["x1", "x2", "in"] and len(side.node) == 4,
         "concat() without matches puts the graphs side by side")
edged = so.concat(g1, g2, edge_match=[("sum", "in")])
out = so.run(edged, dict(feeds, **{"in": np.array([100.0], np.float32)}), ["out"])
tl.check([i.name for i in edged.input] == ["x1", "x2", "in"] and out is not False and np.allclose(out[0], [7.4]),
         "concat() with edge_match rewires g2's readers to sum and keeps its declared inputs")

g3 = so.empty_graph("g3")
g3 = so.add_node(g3, so.node("Sub", inputs=["a", "b"], outputs=["diff"]))
g3 = so.add_input(g3, "a", "FLOAT", [1])
g3 = so.add_input(g3, "b", "FLOAT", [1])
g3 = so.add_output(g3, "diff", "FLOAT", [1])
p2 = so.empty_graph("p2")
p2 = so.add_node(p2, so.node("Neg", inputs=["y"], outputs=["negy"]))
p2 = so.add_input(p2, "y", "FLOAT", [1])
p2 = so.add_output(p2, "negy", "FLOAT", [1])
joined = so.join(g1, p2, g3, pg1_match=[("sum", "a")], pg2_match=[("negy", "b")], complete=False)
out = so.run(joined, {**feeds, "y": np.array([0.5], np.float32)}, ["diff"])
tl.check(out is not False and np.allclose(out[0], [4.2]), f"join(): (1.2 + 2.5) - (-0.5) = 4.2 (got {out})")
both = so.split(g1, g2, g3, cg1_match=[("sum", "in")], cg2_match=[("sum", "a"), ("copy", "b")], complete=False)
out = so.run(both, feeds, ["out", "diff"])
tl.check(out is not False and np.allclose(out[0], [7.4]) and np.allclose(out[1], [2.5]),
         f"split(): sum feeds both children: 7.4 and 3.7 - 1.2 = 2.5 (got {out})")

# ---- editing round trips -------------------------------------------------------------------------------
g = so.graph_from_file("onnx/add-scalars.onnx")
g = so.rename_input(g, "x1", "first")
tl.check([i.name for i in g.input] == ["first", "x2"] and list(g.node[0].input) == ["first", "x2"],
         "rename_input() renames the input and its readers")
g = so.rename_output(g, "sum", "total")
tl.check([o.name for o in g.output] == ["total"] and list(g.node[0].output) == ["total"],
         "rename_output() renames the output and its producer")
out = so.run(g, {"first": feeds["x1"], "x2": feeds["x2"]}, ["total"])
tl.check(out is not False and np.allclose(out[0], [3.7]), "the renamed graph still runs")
g = so.rename_output(so.rename_input(g, "first", "x1"), "total", "sum")
tl.check(g == so.graph_from_file("onnx/add-scalars.onnx"), "renaming back restores the graph")
tl.check(so.add_input(g, "x1", "FLOAT", [1]) is False, "add_input() refuses a duplicate name")
g = so.replace_input(g, "x2", "FLOAT", [3])
tl.check([d.dim_value for d in g.input[1].type.tensor_type.shape.dim] == [3], "replace_input() changes the shape")
g = so.replace_output(so.replace_input(g, "x2", "FLOAT", [1]), "sum", "FLOAT", [1])
tl.check(g == so.graph_from_file("onnx/add-scalars.onnx"), "replace_input()/replace_output() round trip")
g = so.delete_input(g, "x2")
tl.check([i.name for i in g.input] == ["x1"], "delete_input() removes the input")
tl.check(so.check(g, _verbose=False) is False, "check() refuses the graph once x2 is undeclared")
g = so.add_input(g, "x2", "FLOAT", [1])
g = so.delete_output(g, "sum")
tl.check(len(g.output) == 0, "delete_output() removes the output")
g = so.add_output(g, "sum", "FLOAT", [1])
tl.check(so.check(g), "adding them back makes a valid graph again")
tl.check(so.delete_input(g, "nope") is False and so.delete_node(g, "nope") is False,
         "deleting something missing is False")
g = so.add_node(g, so.node("Mul", ["x1", "x2"], ["unused"], name="dead"))
tl.check(so.delete_node(g, "dead") is not False and [n.name for n in g.node] != ["dead"] and len(g.node) == 1,
         "delete_node() removes the named node")
c = so.constant("c", np.array([1, 2, 3]), "INT64")
tl.check(c.op_type == "Constant" and onnx.numpy_helper.to_array(c.attribute[0].t).dtype == np.int64,
         "constant() makes an INT64 Constant node")
n = so.node("Gemm", ["a", "b"], ["y"], transB=1, alpha=0.5)
tl.check({a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} == {"transB": 1, "alpha": 0.5},
         "node() keyword arguments become attributes")

# ---- clean: dead nodes and unused initializers go (otter_graph_clean), out of order nodes get sorted -------
g = so.empty_graph("dirty")
g = so.add_node(g, so.node("Mul", ["s", "k"], ["y"], name="late"))
g = so.add_node(g, so.node("Add", ["x1", "x2"], ["s"], name="early"))
g = so.add_node(g, so.node("Neg", ["x1"], ["dead_out"], name="dead"))
g.initializer.append(onnx.numpy_helper.from_array(np.array([3.0], np.float32), "k"))
g.initializer.append(onnx.numpy_helper.from_array(np.array([9.0], np.float32), "unused"))
g = so.add_input(g, "x1", "FLOAT", [1])
g = so.add_input(g, "x2", "FLOAT", [1])
g = so.add_output(g, "y", "FLOAT", [1])
cleaned = so.clean(g)
tl.check([n.name for n in cleaned.node] == ["early", "late"], "clean() drops the dead node and sorts the rest")
tl.check([t.name for t in cleaned.initializer] == ["k"], "clean() drops the unused initializer")
out = so.run(cleaned, feeds, ["y"])
tl.check(out is not False and np.allclose(out[0], [11.1]), "the cleaned graph computes (1.2 + 2.5) * 3")

# ---- check: otter's messages ---------------------------------------------------------------------------
import contextlib  # noqa: E402
import io  # noqa: E402

bad = so.empty_graph("bad")
bad = so.add_node(bad, so.node("Add", ["x1", "ghost"], ["sum"], name="adder"))
bad = so.add_input(bad, "x1", "FLOAT", [1])
bad = so.add_output(bad, "sum", "FLOAT", [1])
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    verdict = so.check(bad)
text = printed.getvalue()
print(text, end="")
tl.check(verdict is False and "adder" in text and "'ghost' is not defined" in text,
         "check() refuses an undefined input with otter's message naming node and tensor")
mismatch = so.empty_graph("mismatch")
mismatch = so.add_node(mismatch, so.node("Add", ["x1", "x2"], ["sum"], name="adder"))
mismatch = so.add_input(mismatch, "x1", "FLOAT", [2])
mismatch = so.add_input(mismatch, "x2", "FLOAT", [3])
mismatch = so.add_output(mismatch, "sum", "FLOAT", [2])
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    verdict = so.check(mismatch)
print(printed.getvalue(), end="")
tl.check(verdict is False and "adder" in printed.getvalue(), "check() runs shape inference (2 vs 3 broadcast)")
tl.check(so.check(so.empty_graph()) is False, "check() refuses an empty graph (no inputs or outputs)")
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    failed_run = so.run(bad, {"x1": feeds["x1"]}, ["sum"])
tl.check(failed_run is False and "ghost" in printed.getvalue(), "run() of a broken graph is False with the reason")
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    failed_run = so.run(so.graph_from_file("onnx/add-scalars.onnx"),
                        {"x1": np.array([1], np.int64), "x2": feeds["x2"]}, ["sum"])
tl.check(failed_run is False and "x1" in printed.getvalue(),
         f"run() with an int64 feed for a float input is False naming x1 ({printed.getvalue().strip()})")

# ---- listings and Scailable inputs ---------------------------------------------------------------------
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    so.list_data_types()
    so.list_operators()
text = printed.getvalue()
tl.check('"FLOAT": 1' in text and '"INT64": 7' in text, "list_data_types() names the types add_input() takes")
tl.check('"Add [' in text and '"Conv [' in text, "list_operators() lists otter's operators")
example = so.sclbl_input({"x1": feeds["x1"]}, _verbose=False)
import base64  # noqa: E402
import json  # noqa: E402

decoded = onnx.TensorProto.FromString(base64.b64decode(json.loads(example)["input"]))
tl.check(json.loads(example)["type"] == "pb" and np.allclose(onnx.numpy_helper.to_array(decoded), [1.2]),
         "sclbl_input() encodes a TensorProto in base64")
raw = json.loads(so.sclbl_input(feeds, "raw", _verbose=False))
tl.check(raw["type"] == "raw" and np.frombuffer(base64.b64decode(raw["input"][1]), np.float32)[0] == np.float32(2.5),
         "sclbl_input(raw) encodes the raw bytes of each input")

sys.exit(tl.finish("test_python_graph"))
