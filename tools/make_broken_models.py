#!/usr/bin/python3
"""Write a corpus of deliberately broken ONNX models (and a few valid edge cases) to tests/data/broken/.

Usage (from anywhere, with Debian's python3 and its python3-onnx):
    /usr/bin/python3 tools/make_broken_models.py [output folder, default tests/data/broken]

Each file is named after what is wrong with it; files starting with "valid_" are edge cases that
onnx.checker.check_model(full_check=True) accepts. tests/test_checker_agreement.py compares otter's
verdict on each with onnx's. The script prints onnx's verdict for every file it writes.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name, elem=F, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def model(nodes, inputs, outputs, inits=(), opset=13, ir=8, extra_opsets=(), name="g", **kw):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    opsets = [helper.make_opsetid("", opset)] if opset is not None else []
    opsets += [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=opsets, **kw)
    m.ir_version = ir
    return m


def relu_model(**kw):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x")], [vi("y")], **kw)


def cases():
    c = {}
    n = helper.make_node

    # ---- structure ----
    c["dangling_input"] = model([n("Add", ["x", "missing"], ["y"], name="add")], [vi("x")], [vi("y")])
    c["duplicate_output_name"] = model(
        [n("Relu", ["x"], ["t"], name="r1"), n("Neg", ["x"], ["t"], name="r2"), n("Add", ["t", "t"], ["y"], name="a")],
        [vi("x")], [vi("y")])
    c["cycle"] = model(
        [n("Add", ["x", "t2"], ["t1"], name="a1"), n("Relu", ["t1"], ["t2"], name="r1"),
         n("Identity", ["t2"], ["y"], name="id")], [vi("x")], [vi("y")])
    c["self_loop"] = model([n("Add", ["x", "y"], ["y"], name="a1")], [vi("x")], [vi("y")])
    c["not_topologically_sorted"] = model(
        [n("Neg", ["t"], ["y"], name="second"), n("Relu", ["x"], ["t"], name="first")], [vi("x")], [vi("y")])
    c["duplicate_initializer"] = model(
        [n("Add", ["x", "w"], ["y"], name="add")], [vi("x")], [vi("y")],
        inits=[numpy_helper.from_array(np.ones((2, 3), np.float32), "w"),
               numpy_helper.from_array(np.zeros((2, 3), np.float32), "w")])
    c["duplicate_graph_input"] = model([n("Relu", ["x"], ["y"], name="relu")], [vi("x"), vi("x")], [vi("y")])
    c["output_redefines_input"] = model([n("Relu", ["x"], ["x"], name="relu")], [vi("x")], [vi("x")])
    c["graph_input_without_type"] = model(
        [n("Relu", ["x"], ["y"], name="relu")], [helper.make_empty_tensor_value_info("x")], [vi("y")])
    c["graph_output_without_shape"] = model(
        [n("Relu", ["x"], ["y"], name="relu")], [vi("x")], [helper.make_tensor_value_info("y", F, None)])
    c["graph_without_name"] = relu_model(name="")
    c["empty_input_name_for_required_input"] = model(
        [n("Add", ["x", ""], ["y"], name="add")], [vi("x")], [vi("y")])
    c["node_without_inputs_or_outputs"] = model(
        [n("Relu", ["x"], ["y"], name="relu"), n("Identity", [], [], name="nothing")], [vi("x")], [vi("y")])
    c["initializer_not_input_ir3"] = model(
        [n("Add", ["x", "w"], ["y"], name="add")], [vi("x")], [vi("y")], ir=3,
        inits=[numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    c["subgraph_dangling_input"] = model(
        [n("If", ["cond"], ["y"], name="if",
           then_branch=helper.make_graph([n("Relu", ["nowhere"], ["a"], name="then_relu")], "then", [], [vi("a")]),
           else_branch=helper.make_graph([n("Relu", ["x"], ["b"], name="else_relu")], "else", [], [vi("b")]))],
        [vi("cond", TensorProto.BOOL, ()), vi("x")], [vi("y")])

    c["subgraph_output_shadows_outer_name"] = model(
        [n("Relu", ["x"], ["r"], name="relu"),
         n("If", ["cond"], ["y"], name="if",
           then_branch=helper.make_graph([n("Neg", ["x"], ["r"], name="then_neg")], "then", [], [vi("r")]),
           else_branch=helper.make_graph([n("Identity", ["x"], ["b"], name="else_id")], "else", [], [vi("b")]))],
        [vi("cond", TensorProto.BOOL, ()), vi("x")], [vi("y")])
    body = helper.make_graph(
        [n("Identity", ["cond_in"], ["cond_out"], name="body_cond"), n("Add", ["v_in", "x"], ["v_out"], name="body_add"),
         n("Relu", ["v_out"], ["v_out"], name="body_relu")], "body",
        [vi("iter", I64, ()), vi("cond_in", TensorProto.BOOL, ()), vi("v_in")],
        [vi("cond_out", TensorProto.BOOL, ()), vi("v_out")])
    c["loop_body_duplicate_output"] = model(
        [n("Loop", ["trip", "", "x"], ["y"], name="loop", body=body)], [vi("trip", I64, ()), vi("x")], [vi("y")])

    # ---- model level ----
    m = relu_model()
    m.ClearField("ir_version")
    c["no_ir_version"] = m
    c["ir_version_too_new"] = relu_model(ir=99)
    m = relu_model()
    del m.opset_import[:]
    c["no_opset_import"] = m
    # onnx accepts this (its checker keeps the last entry, otter_model_opset the first): otter refuses.
    c["duplicate_opset_domain"] = relu_model(extra_opsets=[("", 5)])
    c["default_domain_not_imported"] = relu_model(opset=None, extra_opsets=[("ai.onnx.ml", 3)])
    m = relu_model()
    helper.set_model_props(m, {"a": "1"})
    m.metadata_props.add(key="a", value="2")
    c["duplicate_metadata_key"] = m

    # ---- operators and schemas ----
    c["unknown_op"] = model([n("FooBar", ["x"], ["y"], name="foo")], [vi("x")], [vi("y")])
    c["unknown_domain"] = model([n("Relu", ["x"], ["y"], name="relu", domain="com.example")], [vi("x")], [vi("y")])
    c["op_newer_than_opset"] = model([n("HardSwish", ["x"], ["y"], name="hs")], [vi("x")], [vi("y")], opset=13)
    c["deprecated_op"] = model(
        [n("Upsample", ["x", "scales"], ["y"], name="up")], [vi("x"), vi("scales", F, (2,))], [vi("y", F, (4, 6))],
        opset=10)
    c["too_many_inputs"] = model([n("Relu", ["x", "x"], ["y"], name="relu")], [vi("x")], [vi("y")])
    c["too_few_inputs"] = model([n("Add", ["x"], ["y"], name="add")], [vi("x")], [vi("y")])
    c["too_many_outputs"] = model([n("Relu", ["x"], ["y", "z"], name="relu")], [vi("x")], [vi("y"), vi("z")])
    c["batchnorm_disallowed_output_count"] = model(
        [n("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm"], name="bn")],
        [vi("x", F, (1, 2, 3)), vi("s", F, (2,)), vi("b", F, (2,)), vi("m", F, (2,)), vi("v", F, (2,))],
        [vi("y", F, (1, 2, 3)), vi("rm", F, (2,))], opset=9)
    c["wrong_attribute_type"] = model(
        [n("Conv", ["x", "w"], ["y"], name="conv1", kernel_shape=3.0)],
        [vi("x", F, (1, 1, 5, 5)), vi("w", F, (1, 1, 3, 3))], [vi("y", F, (1, 1, 3, 3))])
    c["unknown_attribute"] = model([n("Relu", ["x"], ["y"], name="relu", alpha=0.5)], [vi("x")], [vi("y")])
    c["missing_required_attribute"] = model([n("Cast", ["x"], ["y"], name="cast")], [vi("x")], [vi("y", I64)])
    m = model([n("Transpose", ["x"], ["y"], name="tr", perm=[1, 0])], [vi("x")], [vi("y", F, (3, 2))])
    m.graph.node[0].attribute.extend([helper.make_attribute("perm", [0, 1])])
    c["duplicate_attribute"] = m
    m = model([n("Transpose", ["x"], ["y"], name="tr", perm=[1, 0])], [vi("x")], [vi("y", F, (3, 2))])
    m.graph.node[0].attribute[0].f = 1.0  # an INTS attribute that also holds a float
    c["attribute_two_value_fields"] = m

    # ---- types (found by full_check) ----
    c["type_mismatch"] = model([n("Add", ["x", "i"], ["y"], name="add")], [vi("x"), vi("i", I64)], [vi("y")])
    c["unsupported_input_type"] = model([n("Sqrt", ["i"], ["y"], name="sqrt")], [vi("i", I64)], [vi("y", I64)])
    c["output_type_conflict"] = model([n("Relu", ["x"], ["y"], name="relu")], [vi("x")], [vi("y", I64)])
    c["shape_conflict"] = model(
        [n("MatMul", ["a", "b"], ["y"], name="mm")], [vi("a", F, (2, 3)), vi("b", F, (4, 5))], [vi("y", F, (2, 5))])

    # ---- tensors ----
    t = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    t.raw_data = t.raw_data[:8]
    c["initializer_data_shorter_than_dims"] = model(
        [n("Add", ["x", "w"], ["y"], name="add")], [vi("x")], [vi("y")], inits=[t])
    t = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    t.data_type = TensorProto.UNDEFINED
    c["initializer_undefined_type"] = model(
        [n("Add", ["x", "w"], ["y"], name="add")], [vi("x")], [vi("y")], inits=[t])

    sp = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp"),
        numpy_helper.from_array(np.array([1, 4], np.int64), "sp_indices"), [2, 3])
    m = model([n("Add", ["x", "sp"], ["y"], name="add")], [vi("x")], [vi("y")])
    m.graph.sparse_initializer.extend([sp])
    c["sparse_initializer_into_add"] = m

    # ---- valid edge cases ----
    m = relu_model()
    m.graph.sparse_initializer.extend([sp])
    c["valid_sparse_initializer_unused"] = m
    m = model([n("Relu", ["x"], ["y"], name="relu"), n("Identity", ["sp"], ["z"], name="id", domain="com.example")],
              [vi("x")], [vi("y")], extra_opsets=[("com.example", 1)])
    m.graph.sparse_initializer.extend([sp])
    c["valid_sparse_initializer_into_custom_op"] = m

    c["valid_initializer_not_input_ir4"] = model(
        [n("Add", ["x", "w"], ["y"], name="add")], [vi("x")], [vi("y")], ir=4,
        inits=[numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    c["valid_omitted_optional_input"] = model(
        [n("Clip", ["x", "", "hi"], ["y"], name="clip")], [vi("x"), vi("hi", F, ())], [vi("y")])
    c["valid_custom_domain_op"] = model(
        [n("MyOp", ["x"], ["y"], name="custom", domain="com.example", anything=1)], [vi("x")], [vi("y")],
        extra_opsets=[("com.example", 1)])
    c["valid_subgraph_outer_scope"] = model(
        [n("Relu", ["x"], ["r"], name="relu"),
         n("If", ["cond"], ["y"], name="if",
           then_branch=helper.make_graph([n("Neg", ["r"], ["a"], name="then_neg")], "then", [], [vi("a")]),
           else_branch=helper.make_graph([n("Identity", ["x"], ["b"], name="else_id")], "else", [], [vi("b")]))],
        [vi("cond", TensorProto.BOOL, ()), vi("x")], [vi("y")])
    c["valid_ml_only_no_default_domain"] = model(
        [n("Normalizer", ["x"], ["y"], name="norm", domain="ai.onnx.ml", norm="L2")], [vi("x")], [vi("y")],
        opset=None, extra_opsets=[("ai.onnx.ml", 1)])
    c["valid_old_opset_reshape4"] = model(
        [n("Reshape", ["x"], ["y"], name="reshape", shape=[3, 2])], [vi("x")], [vi("y", F, (3, 2))], opset=4, ir=3)
    body = helper.make_graph(
        [n("Identity", ["cond_in"], ["cond_out"], name="body_cond"), n("Add", ["v_in", "x"], ["v_out"], name="body_add"),
         n("Mul", ["v_in", "x"], ["scan_out"], name="body_mul")], "body",
        [vi("iter", I64, ()), vi("cond_in", TensorProto.BOOL, ()), vi("v_in")],
        [vi("cond_out", TensorProto.BOOL, ()), vi("v_out"), vi("scan_out")])
    c["valid_loop_outer_scope"] = model(
        [n("Loop", ["trip", "", "x"], ["y", "scans"], name="loop", body=body)], [vi("trip", I64, ()), vi("x")],
        [vi("y"), vi("scans", F, (3, 2, 3))])
    c["valid_experimental_op_unchecked"] = model(
        [n("ImageScaler", ["x"], ["y"], name="scaler", scale=2.0, bogus="unchecked")], [vi("x", F, (1, 2, 3, 3))],
        [vi("y", F, (1, 2, 3, 3))], opset=7, ir=3)
    c["valid_unused_value_info"] = relu_model()
    c["valid_unused_value_info"].graph.value_info.extend([vi("ghost")])
    return c


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "broken")
    os.makedirs(out, exist_ok=True)
    for name, m in sorted(cases().items()):
        path = os.path.join(out, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        try:
            onnx.checker.check_model(m, full_check=True)
            verdict = "valid"
        except Exception as e:  # onnx raises ValidationError, InferenceError, ...
            verdict = "invalid: " + str(e).strip().splitlines()[0][:100]
        print("%-45s onnx: %s" % (name, verdict))


if __name__ == "__main__":
    main()
