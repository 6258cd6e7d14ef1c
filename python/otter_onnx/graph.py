"""sclblonnx's graph-editing API over libotter: `import otter_onnx.graph as so` in place of `import sclblonnx as
so`. Graphs are onnx.GraphProto objects as in sclblonnx (so they pass to onnx's own functions); the additions
and deletions are protobuf edits, while checking, cleaning, merging, drawing and running are libotter's.

As in sclblonnx, functions report a failure by printing it and returning False, and editing functions return
the changed graph. Functions that hand the graph to libotter (or store it) wrap it in a model importing the
default domain at onnx's current opset, or at opset=N when given as a keyword argument."""
import base64
import copy
import json
import os
import shutil
import subprocess

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import _graphlib, _lib
from ._lib import OtterError

_node_count = 0


def _print(message, kind="ERROR"):
    """sclblonnx's user feedback: errors and messages go to stdout."""
    print(f"{kind}: {message}" if kind != "LIT" else message)


def _elem_type(data_type):
    """ONNX element type of a sclblonnx type name ("FLOAT", "INT64", ...)."""
    return onnx.TensorProto.DataType.Value(data_type.upper()) if isinstance(data_type, str) else int(data_type)


def _to_model(graph, producer="sclblonnx", opset=None):
    """The graph in a model; opset None: onnx's default opset for the default domain."""
    kwargs = {"producer_name": producer}
    if opset is not None:
        kwargs["opset_imports"] = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, **kwargs)


def _graph_of(data):
    model = onnx.ModelProto()
    model.ParseFromString(data)
    return model.graph


# ---- graphs and files --------------------------------------------------------------------------------------

def empty_graph(_default_name="sclblgraph"):
    """An empty graph named _default_name (it does not pass check(): it has no inputs and outputs)."""
    return onnx.GraphProto(name=_default_name)


def graph_from_file(filename):
    """The graph of an .onnx file, or False when it cannot be read."""
    try:
        with open(filename, "rb") as f:
            model = onnx.ModelProto()
            model.ParseFromString(f.read())
    except Exception as e:  # OSError, or protobuf's DecodeError (its module depends on the protobuf version)
        _print("Unable to open the file: " + str(e))
        return False
    return model.graph


def graph_to_file(graph, filename, _producer="sclblonnx", **kwargs):
    """Stores the graph as an .onnx model; True on success."""
    if not filename:
        _print("Unable to save: Please specify a filename.")
        return False
    if not isinstance(graph, onnx.GraphProto):
        _print("Unable to save: Graph is not an ONNX graph")
        return False
    try:
        model = _to_model(graph, _producer, kwargs.get("opset"))
        folder = os.path.dirname(filename)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(filename, "wb") as f:
            f.write(model.SerializeToString())
    except Exception as e:
        _print("Unable to save the model: " + str(e))
        return False
    return True


# ---- nodes and constants -----------------------------------------------------------------------------------

def node(op_type, inputs, outputs, name="", **kwargs):
    """A new node (onnx.NodeProto); keyword arguments become its attributes. Unnamed nodes get a unique name."""
    global _node_count
    if not name:
        name = f"sclbl-onnx-node{_node_count}"
        _node_count += 1
    try:
        return helper.make_node(op_type, inputs, outputs, name=name, **kwargs)
    except Exception as e:
        _print("Unable to create node: " + str(e))
        return False


def add_node(graph, node, **kwargs):
    """Appends (a copy of) node to the graph."""
    if not isinstance(node, onnx.NodeProto):
        _print("The node is not a valid ONNX node.")
        return False
    graph.node.append(copy.deepcopy(node))
    return graph


def add_nodes(graph, nodes, **kwargs):
    """Appends every node of the list."""
    for n in nodes:
        if add_node(graph, n, **kwargs) is False:
            return False
    return graph


def delete_node(graph, node_name, **kwargs):
    """Removes the node named node_name."""
    for i, n in enumerate(graph.node):
        if n.name == node_name:
            del graph.node[i]
            return graph
    _print(f"Unable to find the node '{node_name}'.")
    return False


def constant(name, value, data_type, **kwargs):
    """A Constant node producing `name` with the numpy value, converted to data_type ("FLOAT", ...)."""
    try:
        elem = _elem_type(data_type)
        array = np.asarray(value, dtype=_lib.numpy_dtype(elem))
        return node("Constant", inputs=[], outputs=[name], name=name + "-constant",
                    value=numpy_helper.from_array(array, name=name))
    except Exception as e:
        _print("Unable to create the constant: " + str(e))
        return False


def add_constant(graph, name, value, data_type, **kwargs):
    """Adds a Constant node producing `name` (see constant())."""
    const = constant(name, value, data_type, **kwargs)
    return add_node(graph, const) if const else False


# ---- inputs and outputs ------------------------------------------------------------------------------------

def _value_info(name, data_type, dimensions):
    return helper.make_tensor_value_info(name, _elem_type(data_type), dimensions)


def _find(values, name):
    return next((i for i, v in enumerate(values) if v.name == name), None)


def _rewire(g, old_name, new_name):
    """Node inputs of g reading old_name read new_name instead."""
    for n in g.node:
        for k, name in enumerate(n.input):
            if name == old_name:
                n.input[k] = new_name


def list_inputs(graph):
    """Prints the graph's inputs with their types; True."""
    for v in graph.input:
        _print(f"{v.name}: {onnx.helper.printable_type(v.type)}", "LIT")
    return True


def list_outputs(graph):
    """Prints the graph's outputs with their types; True."""
    for v in graph.output:
        _print(f"{v.name}: {onnx.helper.printable_type(v.type)}", "LIT")
    return True


def _add_value(graph, values, kind, name, data_type, dimensions):
    """Appends a declared input or output (kind) to values (graph.input or graph.output); graph or False."""
    if _find(values, name) is not None:
        _print(f"The graph already has an {kind} named '{name}'.")
        return False
    try:
        values.append(_value_info(name, data_type, dimensions))
    except Exception as e:
        _print(f"Unable to add the {kind}: " + str(e))
        return False
    return graph


def add_input(graph, name, data_type, dimensions, **kwargs):
    """Declares graph input `name` of type data_type ("FLOAT", ...) and shape dimensions."""
    return _add_value(graph, graph.input, "input", name, data_type, dimensions)


def add_output(graph, name, data_type, dimensions, **kwargs):
    """Declares graph output `name` of type data_type and shape dimensions."""
    return _add_value(graph, graph.output, "output", name, data_type, dimensions)


def _delete(values, name, what):
    i = _find(values, name)
    if i is None:
        _print(f"Unable to find the {what} '{name}'.")
        return False
    del values[i]
    return True


def delete_input(graph, name, **kwargs):
    """Removes the graph input `name` (the nodes reading it are left as they are)."""
    return graph if _delete(graph.input, name, "input") else False


def delete_output(graph, name, **kwargs):
    """Removes the graph output `name` (the node producing it stays)."""
    return graph if _delete(graph.output, name, "output") else False


def _replace(values, name, data_type, dimensions, what):
    i = _find(values, name)
    if i is None:
        _print(f"Unable to find the {what} '{name}'.")
        return False
    values[i].CopyFrom(_value_info(name, data_type, dimensions))
    return True


def replace_input(graph, name, data_type, dimensions, **kwargs):
    """Changes the type and shape of the graph input `name`."""
    return graph if _replace(graph.input, name, data_type, dimensions, "input") else False


def replace_output(graph, name, data_type, dimensions, **kwargs):
    """Changes the type and shape of the graph output `name`."""
    return graph if _replace(graph.output, name, data_type, dimensions, "output") else False


def rename_input(graph, current_name, new_name, **kwargs):
    """Renames the graph input and every node input reading it."""
    i = _find(graph.input, current_name)
    if i is None:
        _print(f"Unable to find the input '{current_name}'.")
        return False
    graph.input[i].name = new_name
    _rewire(graph, current_name, new_name)
    return graph


def rename_output(graph, current_name, new_name, **kwargs):
    """Renames the graph output, the node output producing it and the node inputs reading it."""
    i = _find(graph.output, current_name)
    if i is None:
        _print(f"Unable to find the output '{current_name}'.")
        return False
    graph.output[i].name = new_name
    for n in graph.node:
        for field in (n.input, n.output):
            for k, name in enumerate(field):
                if name == current_name:
                    field[k] = new_name
    return graph


# ---- checking, cleaning, drawing, running (libotter) -------------------------------------------------------

def check(graph, _producer="sclblonnx", _onnx_check=True, _sclbl_check=True, _verbose=True, **kwargs):
    """True when otter's checker accepts the graph (with static shape inference); otherwise prints every
    problem otter found and returns False. _sclbl_check also requires declared inputs and outputs."""
    if not isinstance(graph, onnx.GraphProto):
        _print("Graph is not an ONNX graph.")
        return False
    problems = []
    if _sclbl_check:
        if not graph.input:
            problems.append("the graph has no inputs")
        if not graph.output:
            problems.append("the graph has no outputs")
    if _onnx_check:
        try:
            problems += _graphlib.check(_to_model(graph, _producer, kwargs.get("opset")).SerializeToString())
        except OtterError as e:
            problems.append(str(e))
    if problems and _verbose:
        for p in problems:
            _print(p)
    return not problems


def clean(graph, _optimize=True, _simplify=True, _remove_initializer=True, _producer="sclblonnx",
          _verbose=True, **kwargs):
    """A tidied copy of the graph (otter_graph_clean: unused nodes, duplicate and unused initializers and
    stale value_info removed, nodes sorted topologically), or False when the graph cannot be cleaned."""
    try:
        data, stats = _graphlib.clean(_to_model(graph, _producer, kwargs.get("opset")).SerializeToString())
    except OtterError as e:
        _print("Unable to clean the graph: " + str(e))
        return False
    if _verbose and any(stats.values()):
        _print(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in stats.items() if v), "MSG")
    return _graph_of(data)


def display(graph, _tmpfile=".tmp.svg", **kwargs):
    """Draws the graph as SVG (otter's DOT through graphviz's `dot`) into _tmpfile; returns its path, or
    False when `dot` is missing or the graph cannot be drawn."""
    dot = shutil.which("dot")
    if dot is None:
        _print("display() needs graphviz's `dot` on the PATH.")
        return False
    try:
        model = _to_model(graph, opset=kwargs.get("opset"))
        text = _graphlib.to_dot(model.SerializeToString(), kwargs.get("rankdir"))
    except OtterError as e:
        _print("Unable to draw the graph: " + str(e))
        return False
    r = subprocess.run([dot, "-Tsvg", "-o", _tmpfile], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        _print("dot failed: " + r.stderr.strip())
        return False
    return _tmpfile


def run(graph, inputs, outputs, _tmpfile=None, **kwargs):
    """Runs the graph with otter on inputs ({name: numpy array}); returns the list of the named outputs, or
    False (with otter's message printed) when it fails. _tmpfile is sclblonnx's; otter runs from memory."""
    try:
        return _graphlib.run(_to_model(graph, opset=kwargs.get("opset")).SerializeToString(), inputs,
                             list(outputs))
    except OtterError as e:
        _print("Failed to run the model: " + str(e))
        return False


# ---- merging -----------------------------------------------------------------------------------------------

def postfix_names(g, postfix="_g1", elem="node"):
    """Appends postfix to the names of g's elements of kind elem: "node", "init", "edge", "input",
    "output", "io" or "all"."""
    if elem == "node":
        for n in g.node:
            n.name += postfix
    elif elem == "init":
        for t in g.initializer:
            t.name += postfix
    elif elem == "edge":
        for n in g.node:
            for field in (n.input, n.output):
                for k, name in enumerate(field):
                    field[k] = name + postfix
    elif elem in ("input", "output"):
        for v in (g.input if elem == "input" else g.output):
            v.name += postfix
    elif elem in ("io", "all"):
        for kind in (("input", "output") if elem == "io" else ("node", "init", "edge", "input", "output")):
            postfix_names(g, postfix, kind)
    else:
        _print("No names have been changed; did you select the right element?", "MSG")
    return g


def merge(sg1, sg2, outputs=None, inputs=None, io_match=None, complete=True, _verbose=True, **kwargs):
    """sg1 followed by sg2: each matched output of sg1 (outputs[i], or io_match's (output, input) pairs)
    feeds input inputs[i] of sg2 (otter_model_merge: matched types must agree). sg1's other outputs stay
    outputs. Node names get the postfixes _sg1 and _sg2 as in sclblonnx. complete: the result must pass
    check()."""
    outputs, inputs, io_match = list(outputs or []), list(inputs or []), list(io_match or [])
    if not isinstance(sg1, onnx.GraphProto) or not isinstance(sg2, onnx.GraphProto):
        _print("Both graphs must be ONNX graphs.")
        return False
    if len(outputs) != len(inputs):
        _print("The number of outputs and inputs do not match.")
        return False
    if inputs and io_match:
        _print("Please use either the inputs/outputs arguments OR the io_match argument (not both).")
        return False
    io_match = io_match or list(zip(outputs, inputs))
    a = postfix_names(copy.deepcopy(sg1), "_sg1", "node")
    b = postfix_names(copy.deepcopy(sg2), "_sg2", "node")
    opset = kwargs.get("opset")
    try:
        data = _graphlib.merge(_to_model(a, opset=opset).SerializeToString(),
                               _to_model(b, opset=opset).SerializeToString(), io_match, keep_a_outputs=True,
                               graph_name=sg1.name)
    except OtterError as e:
        _print("Graph merge failed: " + str(e))
        return False
    g = _graph_of(data)
    if complete and not check(g, _verbose=_verbose, **kwargs):
        _print("The end result does not pass check(). Set complete=False to merge without checking.")
        return False
    return g


def concat(sg1, sg2, complete=False, rename_nodes=True, io_match=None, rename_io=False, edge_match=None,
           rename_edges=False, _verbose=False, **kwargs):
    """sclblonnx's flexible paste of sg2 after sg1: io_match pairs (sg1 output, sg2 input) are wired (the
    output and input are dropped, sg2's readers read sg1's tensor), edge_match pairs (sg1 edge, sg2 edge)
    rewire sg2's node inputs, the rename_* flags postfix names with _sg1/_sg2. complete: the result must
    pass check()."""
    if not isinstance(sg1, onnx.GraphProto) or not isinstance(sg2, onnx.GraphProto):
        _print("Both graphs must be ONNX graphs.")
        return False
    a, b = copy.deepcopy(sg1), copy.deepcopy(sg2)
    if rename_nodes:
        postfix_names(a, "_sg1", "node")
        postfix_names(b, "_sg2", "node")
    for out_name, in_name in io_match or []:
        for values, name in ((a.output, out_name), (b.input, in_name)):
            i = _find(values, name)
            if i is not None:
                del values[i]
        _rewire(b, in_name, out_name)
    if rename_io:
        postfix_names(a, "_sg1", "io")
        postfix_names(b, "_sg2", "io")
    for out_name, in_name in edge_match or []:
        _rewire(b, in_name, out_name)
    if rename_edges:
        postfix_names(a, "_sg1", "edge")
        postfix_names(b, "_sg2", "edge")
    for field in ("initializer", "node", "input", "output", "value_info"):
        getattr(a, field).extend(getattr(b, field))
    if complete and not check(a, _verbose=_verbose, **kwargs):
        _print("The end result does not pass check(). Set complete=False to continue without checking.")
        return False
    return a


def join(pg1, pg2, cg, pg1_match=None, pg2_match=None, complete=True, _verbose=True, **kwargs):
    """Two parents pg1 and pg2 feeding one child cg; the match lists pair parent outputs with cg inputs."""
    parents = concat(pg1, pg2, complete=False, **kwargs)
    if parents is False:
        return False
    return concat(parents, cg, complete=complete, io_match=list(pg1_match or []) + list(pg2_match or []),
                  _verbose=_verbose, **kwargs)


def split(pg, cg1, cg2, cg1_match=None, cg2_match=None, complete=True, _verbose=True, **kwargs):
    """One parent pg feeding two children; the match lists pair pg's outputs with the children's inputs.
    pg's outputs matched to a child are wired and stop being graph outputs."""
    first = concat(pg, cg1, complete=False, io_match=cg1_match, **kwargs)
    if first is False:
        return False
    return concat(first, cg2, complete=complete, io_match=cg2_match, _verbose=_verbose, **kwargs)


# ---- listings and runtime inputs ---------------------------------------------------------------------------

def list_data_types():
    """Prints the element types otter supports, by the names add_input() takes, with their numbers; True."""
    known = set(onnx.TensorProto.DataType.values())
    types = {onnx.TensorProto.DataType.Name(t): t for t in _graphlib.dtypes() if t in known and t != 0}
    _print(json.dumps(types, indent=2), "MSG")
    return True


def list_operators():
    """Prints the operators otter runs (domain, op_type, versions); True."""
    ops = [f"{d + '.' if d != 'ai.onnx' else ''}{op} {versions}"
           for d, op, versions, kernel in _graphlib.operators() if kernel]
    _print(json.dumps(ops, indent=2), "MSG")
    return True


def sclbl_input(inputs, example_type="pb", _verbose=True):
    """The JSON input a Scailable runtime takes for these inputs ({name: numpy array}): base64 of the raw
    bytes (example_type "raw") or of TensorProtos ("pb")."""
    if not inputs:
        _print("No input provided.")
        return False
    if example_type == "raw":
        encoded = [base64.b64encode(np.ascontiguousarray(v).tobytes()).decode("ascii") for v in inputs.values()]
    else:
        encoded = [base64.b64encode(numpy_helper.from_array(v).SerializeToString()).decode("ascii")
                   for v in inputs.values()]
    value = json.dumps(encoded[0]) if len(encoded) == 1 else json.dumps(encoded, separators=(",", ":"))
    result = '{"input": ' + value + ', "type":"' + ("raw" if example_type == "raw" else "pb") + '"}'
    if _verbose:
        _print("The following input string can be used for the Scailable runtime:", "MSG")
        _print(result, "LIT")
    return result
