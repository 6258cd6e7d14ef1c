"""docs/operators.md is `otter ops --markdown`, and `otter ops --json` lists the same operators as objects with
exactly the keys domain, op_type, since_versions (ints), kernel, shape_inference, gradient (booleans).
Regenerate the document with: build/release/otter ops --markdown > docs/operators.md"""
import difflib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402

KEYS = {"domain", "op_type", "since_versions", "kernel", "shape_inference", "gradient"}


def main():
    md = tl.otter("ops", "--markdown", echo="fail")
    check(md.returncode == 0, "otter ops --markdown exits 0")
    doc_path = os.path.join(tl.SRC, "docs", "operators.md")
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read()
    if doc != md.stdout:
        sys.stdout.writelines(difflib.unified_diff(doc.splitlines(True), md.stdout.splitlines(True),
                                                   "docs/operators.md", "otter ops --markdown"))
    check(doc == md.stdout, "docs/operators.md is current (regenerate: otter ops --markdown > docs/operators.md)")

    js = tl.otter("ops", "--json", echo="fail")
    check(js.returncode == 0, "otter ops --json exits 0")
    ops = json.loads(js.stdout)
    check(isinstance(ops, list) and len(ops) > 200, f"--json is an array of {len(ops)} operators")
    bad_keys = [o for o in ops if set(o) != KEYS]
    check(not bad_keys, f"every object has exactly the keys {sorted(KEYS)} ({len(bad_keys)} do not)")
    bad_types = [o for o in ops if not (isinstance(o["domain"], str) and isinstance(o["op_type"], str)
                                        and all(isinstance(v, int) for v in o["since_versions"])
                                        and all(isinstance(o[k], bool)
                                                for k in ("kernel", "shape_inference", "gradient")))]
    check(not bad_types, f"domain, op_type are strings, since_versions ints, the rest booleans "
          f"({len(bad_types)} are not: {bad_types[:3]})")
    unsorted = [o["op_type"] for o in ops if o["since_versions"] != sorted(set(o["since_versions"]))]
    check(not unsorted, f"each operator's since_versions are strictly ascending (not: {unsorted})")
    rows = [line.split(" | ")[:2] for line in md.stdout.splitlines() if line.startswith("| ai.") or
            line.startswith("| com.")]
    check([[r[0][2:], r[1]] for r in rows] == [[o["domain"], o["op_type"]] for o in ops],
          f"--markdown and --json list the same {len(ops)} operators in the same order")
    for name in ("Softmax", "Conv", "Gather", "LayerNormalization"):
        o = next((o for o in ops if o["domain"] == "ai.onnx" and o["op_type"] == name), None)
        check(o is not None and o["kernel"] and o["shape_inference"] and o["gradient"],
              f"{name}: kernel, shape inference and gradient rule")
    return tl.finish("test_operators_doc")


if __name__ == "__main__":
    sys.exit(main())
