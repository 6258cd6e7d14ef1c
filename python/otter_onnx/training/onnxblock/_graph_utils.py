"""Naming and lookup helpers shared by the blocks."""
import itertools

import onnx

_counter = itertools.count()


def names_in(model):
    """Every tensor name the graph uses."""
    g = model.graph
    names = {v.name for v in itertools.chain(g.input, g.output, g.value_info, g.initializer)}
    for n in g.node:
        names.update(n.input)
        names.update(n.output)
    return names


def fresh_name(model, prefix):
    """A name starting with prefix that the graph does not use yet."""
    used = names_in(model)
    while True:
        name = f"{prefix}_{next(_counter)}"
        if name not in used:
            return name


def value_info(model, name):
    """The declared or inferred type of tensor `name` (a ValueInfoProto), or None."""
    for v in itertools.chain(model.graph.input, model.graph.output, model.graph.value_info):
        if v.name == name:
            return v
    inferred = onnx.shape_inference.infer_shapes(model)
    for v in itertools.chain(inferred.graph.value_info, inferred.graph.output):
        if v.name == name:
            return v
    return None


def register_graph_outputs(model, outputs):
    """Makes `outputs` (a name or a list of names) the graph's outputs, typed by shape inference."""
    outputs = [outputs] if isinstance(outputs, str) else list(outputs)
    typed = []
    for name in outputs:
        info = value_info(model, name)
        if info is None:
            raise RuntimeError(f"output '{name}': no node produces it and its type cannot be inferred")
        typed.append(onnx.ValueInfoProto.FromString(info.SerializeToString()))
    del model.graph.output[:]
    model.graph.output.extend(typed)
