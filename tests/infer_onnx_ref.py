#!/usr/bin/python3
"""Reference for test_infer_corpus: onnx.shape_inference.infer_shapes(model, data_prop=True) on every
model.onnx under the given folders, printed as tab-separated lines:

  M <model path>                      a model; followed by its values, or
  E <message>                         onnx's inference failed on it
  V <name> <elem type> <rank> <dims>  a value in the inferred main graph (value_info and outputs);
                                      rank -1: no shape; dims space-separated: N, $param or ?
The values come from a second run on the model with its graph outputs' types removed, so the
outputs are inferred rather than copied from their declarations (a failure there prints S).
"""
import os
import sys

import onnx
import onnx.shape_inference


def dims_of(t):
    if not t.HasField("shape"):
        return -1, ""
    out = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            out.append(str(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append("$" + d.dim_param)
        else:
            out.append("?")
    return len(out), " ".join(out)


def main():
    for root in sys.argv[1:]:
        for case in sorted(os.listdir(root)):
            path = os.path.join(root, case, "model.onnx")
            if not os.path.exists(path):
                continue
            print("M\t" + path)
            try:
                m = onnx.load(path)
                inf = onnx.shape_inference.infer_shapes(m, data_prop=True)
            except Exception as e:  # onnx refuses the model: report it
                print("E\t" + str(e).replace("\n", " ").replace("\t", " ")[:300])
                continue
            for o in m.graph.output:
                o.ClearField("type")
            try:
                inf = onnx.shape_inference.infer_shapes(m, data_prop=True)
            except Exception as e:
                print("S\t" + str(e).replace("\n", " ").replace("\t", " ")[:300])
                continue
            seen = set()
            for vi in list(inf.graph.value_info) + list(inf.graph.output):
                if vi.type.WhichOneof("value") != "tensor_type" or vi.name in seen:
                    continue
                seen.add(vi.name)
                t = vi.type.tensor_type
                rank, dims = dims_of(t)
                print("V\t%s\t%d\t%d\t%s" % (vi.name, t.elem_type, rank, dims))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
