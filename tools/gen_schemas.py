#!/usr/bin/python3
"""Generate src/check/schema_data.c: otter's operator schema table.

Usage (from the repository root, with Debian's python3 and its python3-onnx):
    /usr/bin/python3 tools/gen_schemas.py [output path, default src/check/schema_data.c]
        [--spec DIR, default ../shared/onnx-1.23/spec]

Two sources, one table:
  - ONNX 1.23's operator changelogs (spec/Changelog.md, Changelog-ml.md) list every version of every
    schema of ai.onnx (opsets 1..28), ai.onnx.preview, ai.onnx.preview.training and ai.onnx.ml. Every
    entry of the table comes from them.
  - python3-onnx (1.12, Debian's) is the agreement reference for the versions it knows: each of those
    entries must equal what onnx.defs.get_all_schemas_with_history() says, field by field, or the
    generator fails naming the difference. The markdown prints float defaults rounded to 5 decimals
    (onnx/defs/gen_doc.py's format_value); the exact value is taken from python3-onnx (the same
    version, or an earlier version of the same attribute that rounds to the printed text).

Facts neither source states are copied by hand from onnx's C++ definitions (onnx/defs/*.cc), see
UNCHECKED_ATTRS and ALLOWED_OUTPUT_COUNTS, and from ONNX Runtime's contrib schemas, see ORT_SCHEMAS.
The layout of the emitted structs is declared in src/check/schema.h.
"""

import ast
import os
import re
import sys

import numpy as np
import onnx
import onnx.defs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT_SPEC = os.path.join(ROOT, "..", "shared", "onnx-1.23", "spec")
SPEC_VERSION = "1.23"
DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")

# OpSchema::AllowUncheckedAttributes() (onnx/defs/nn/defs.cc): attributes not in the schema are accepted.
UNCHECKED_ATTRS = {("", "LayerNormalization", 17)}

# OpSchema::NumOutputs({...}) (onnx/defs/nn/old.cc, nn/defs.cc): only these output counts are allowed.
ALLOWED_OUTPUT_COUNTS = {
    ("", "BatchNormalization", 1): (1, 5),
    ("", "BatchNormalization", 6): (1, 5),
    ("", "BatchNormalization", 7): (1, 5),
    ("", "BatchNormalization", 9): (1, 5),
    ("", "BatchNormalization", 14): (1, 3),
    ("", "BatchNormalization", 15): (1, 3),
}

# ONNX Runtime registers LayerNormalization in the default domain since version 1 as a contrib schema
# (onnxruntime/core/graph/contrib_ops/contrib_defs.cc, ONNX_CONTRIB_OPERATOR_SCHEMA(LayerNormalization)
# .SetDomain(kOnnxDomain).SinceVersion(1)) with LayerNormalization-17's attributes, inputs and outputs;
# its training artifacts use it at opset 14. (domain, name, since_version) -> the ONNX schema it copies.
ORT_SCHEMAS = {("", "LayerNormalization", 1): ("", "LayerNormalization", 17)}

# Schemas ONNX changed in place after 1.12: the table follows ONNX 1.23, and the agreement check expects
# exactly these to differ from python3-onnx 1.12.
REVISED_SINCE_1_12 = {
    # onnx/defs/math/defs.cc: Erf-13's type constraint was narrowed to float types.
    ("", "Erf", 13): "T narrowed to float tensors",
    # onnx/defs/tensor/defs.cc: GridSample-16 had grid bound to T1 and Y to T2; fixed to grid: T2, Y: T1.
    ("", "GridSample", 16): "grid and Y type parameters swapped back (grid: T2, Y: T1)",
}

INT_MAX = 2147483647

ATTR_TYPES = {
    "float": 1, "int": 2, "string": 3, "tensor": 4, "graph": 5, "list of floats": 6, "list of ints": 7,
    "list of strings": 8, "list of tensors": 9, "list of graphs": 10, "sparse_tensor": 11,
    "list of sparse_tensors": 12, "type_proto": 13, "list of type_protos": 14,
}


# ---- the changelogs ------------------------------------------------------------------------------

HEADING = re.compile(r'^### <a name="([A-Za-z0-9_.]+)-(\d+)"></a>\*\*[^*]+\*\*( \(deprecated\))?</a>$')
DOMAIN_HEADING = re.compile(r"^# (\S+)( \(default\))?$")
SET_HEADING = re.compile(r"^## Version (\d+) of ")
SECTION = re.compile(r"^#### (Attributes|Inputs|Outputs|Type Constraints|Version)( \((\d+) - (\d+|&#8734;)\))?$")
PARAM = re.compile(r"^<dt><tt>(.+?)</tt>( \(([a-z, -]+)\))? : (.+)</dt>$")
ATTR = re.compile(r"^<dt><tt>(.+?)</tt> : ([a-z_ ]+?)( \(required\)| \(default is (.*)\))?</dt>$")


def split_types(text):
    """'tensor(float), map(string, float)' -> ['tensor(float)', 'map(string, float)']."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    out.append(cur.strip())
    return out


def canonical_type(text):
    """ONNX's canonical spelling of a type string, as python3-onnx reports it and otter's
    ot_type_string writes it: map values are types ("map(int64, float)" -> "map(int64,tensor(float))")."""
    text = text.strip()
    if "(" not in text:
        return text
    head, inner = text[:text.index("(")], text[text.index("(") + 1:-1]
    if head == "map":
        key, value = split_types(inner)
        return "map(%s,%s)" % (key, canonical_type(value if "(" in value else "tensor(%s)" % value))
    return "%s(%s)" % (head, canonical_type(inner))


def md_default(atype, text, where):
    """A default as the changelog prints it -> a Python value (floats still as printed)."""
    if atype == 2:
        return int(text)
    if atype == 1:
        return ("printed", text.strip("()"))
    if atype == 3:
        return text
    if atype in (6, 7, 8):
        items = ast.literal_eval(text)
        conv = {6: lambda x: ("printed", str(x)), 7: int, 8: str}[atype]
        return tuple(conv(x) for x in items)
    raise ValueError("%s: default of type %d not handled" % (where, atype))


def parse_changelog(path):
    schemas = []
    domain, opset, cur, section = None, None, None, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines:
        m = DOMAIN_HEADING.match(line)
        if m:
            domain = "" if m.group(2) else m.group(1)
            continue
        m = SET_HEADING.match(line)
        if m:
            opset = int(m.group(1))
            continue
        m = HEADING.match(line)
        if m:
            qual, since = m.group(1), int(m.group(2))
            name = qual[len(domain) + 1:] if domain and qual.startswith(domain + ".") else qual
            if since != opset:
                raise ValueError("%s: %s-%d listed under opset %d" % (path, name, since, opset))
            cur = {"domain": domain, "name": name, "since": since, "deprecated": bool(m.group(3)),
                   "inputs": [], "outputs": [], "attrs": {}, "constraints": [], "in_range": None,
                   "out_range": None}
            schemas.append(cur)
            section = None
            continue
        if cur is None:
            continue
        m = SECTION.match(line)
        if m:
            section = m.group(1)
            if m.group(2):
                hi = INT_MAX if m.group(4) == "&#8734;" else int(m.group(4))
                cur["in_range" if section == "Inputs" else "out_range"] = (int(m.group(3)), hi)
            continue
        if not line.startswith("<dt>"):
            continue
        where = "%s-%d" % (cur["name"], cur["since"])
        if section == "Attributes":
            m = ATTR.match(line)
            if not m or m.group(2) not in ATTR_TYPES:
                raise ValueError("%s: attribute line not understood: %s" % (where, line))
            atype = ATTR_TYPES[m.group(2)]
            default = None
            if m.group(4) is not None:
                default = md_default(atype, m.group(4), where + "." + m.group(1))
            cur["attrs"][m.group(1)] = (atype, m.group(3) == " (required)", default)
        elif section in ("Inputs", "Outputs"):
            m = PARAM.match(line)
            if not m:
                raise ValueError("%s: parameter line not understood: %s" % (where, line))
            flags = set(x.strip() for x in (m.group(3) or "").split(",") if x.strip())
            unknown = flags - {"optional", "variadic", "heterogeneous", "differentiable", "non-differentiable"}
            if unknown:
                raise ValueError("%s: unknown parameter flags %s" % (where, unknown))
            option = 1 if "optional" in flags else 2 if "variadic" in flags else 0
            diff = 1 if "differentiable" in flags else 2 if "non-differentiable" in flags else 0
            homogeneous = not (option == 2 and "heterogeneous" in flags)
            cur["inputs" if section == "Inputs" else "outputs"].append(
                [m.group(1), canonical_type(m.group(4)), option, homogeneous, diff])
        elif section == "Type Constraints":
            m = re.match(r"^<dt><tt>(.+?)</tt> : (.+)</dt>$", line)
            if not m:
                raise ValueError("%s: type constraint line not understood: %s" % (where, line))
            cur["constraints"].append(
                (m.group(1), tuple(sorted(canonical_type(t) for t in split_types(m.group(2))))))
    return schemas


def record_from_changelog(s):
    constraints = dict(s["constraints"])

    def params(lst):
        return tuple((n, t, constraints.get(t, (t,)), opt, homo, diff) for n, t, opt, homo, diff in lst)

    n_in, n_out = len(s["inputs"]), len(s["outputs"])
    min_in, max_in = s["in_range"] or (n_in, n_in)
    min_out, max_out = s["out_range"] or (n_out, n_out)
    return {
        "key": (s["domain"], s["name"], s["since"]),
        "deprecated": s["deprecated"],
        "counts": (min_in, max_in, min_out, max_out),
        "inputs": params(s["inputs"]),
        "outputs": params(s["outputs"]),
        "attrs": tuple(sorted((n,) + v for n, v in s["attrs"].items())),
        "constraints": tuple(s["constraints"]),
    }


# ---- python3-onnx ---------------------------------------------------------------------------------

def py_default(dv):
    T = onnx.AttributeProto
    if dv.type == 0:
        return None
    if dv.type == T.INT:
        return dv.i
    if dv.type == T.FLOAT:
        return float(dv.f)
    if dv.type == T.STRING:
        return dv.s.decode("utf-8")
    if dv.type == T.INTS:
        return tuple(dv.ints)
    if dv.type == T.FLOATS:
        return tuple(float(x) for x in dv.floats)
    if dv.type == T.STRINGS:
        return tuple(x.decode("utf-8") for x in dv.strings)
    raise ValueError("default of type %d not handled" % dv.type)


def record_from_python(s):
    constraints = {c.type_param_str: tuple(sorted(canonical_type(t) for t in c.allowed_type_strs))
                   for c in s.type_constraints}

    def params(lst):
        return tuple((p.name, p.typeStr, tuple(sorted(p.types)) if p.types else constraints.get(p.typeStr, ()),
                      int(p.option.value), bool(p.isHomogeneous), int(p.differentiationCategory.value))
                     for p in lst)

    attrs = []
    for name in sorted(s.attributes):
        a = s.attributes[name]
        attrs.append((name, int(a.type.value), bool(a.required), py_default(a.default_value)))
    return {
        "key": (s.domain, s.name, s.since_version),
        "deprecated": bool(s.deprecated),
        "counts": (s.min_input, min(s.max_input, INT_MAX), s.min_output, min(s.max_output, INT_MAX)),
        "inputs": params(s.inputs),
        "outputs": params(s.outputs),
        "attrs": tuple(attrs),
        "constraints": tuple((c.type_param_str, constraints[c.type_param_str]) for c in s.type_constraints),
    }


def printed(x):
    """A float as the changelog prints it (onnx/defs/gen_doc.py, format_value), parentheses dropped."""
    text = str(np.round(x, 5))
    return "%e" % x if len(text) > 10 else text


def printed_matches(text, exact):
    return text == printed(exact)


def resolve_floats(rec, history):
    """Replace the changelog's printed float defaults with exact ones: python3-onnx's value of the
    same attribute in this or the closest earlier version, when it prints the same; else the printed
    text's float32 value."""
    domain, name, since = rec["key"]
    attrs = []
    for a_name, a_type, req, dflt in rec["attrs"]:
        if a_type in (1, 6) and dflt is not None:
            candidates = [r for r in history.get((domain, name), []) if r["key"][2] <= since]
            exact = None
            for r in reversed(candidates):
                for pa in r["attrs"]:
                    if pa[0] == a_name and pa[1] == a_type and pa[3] is not None:
                        exact = pa[3]
                        break
                if exact is not None:
                    break
            if a_type == 1:
                text = dflt[1]
                dflt = exact if exact is not None and printed_matches(text, exact) else float(np.float32(text))
            else:
                texts = [x[1] for x in dflt]
                ok = exact is not None and len(exact) == len(texts) and all(
                    printed_matches(t, e) for t, e in zip(texts, exact))
                dflt = tuple(exact) if ok else tuple(float(np.float32(t)) for t in texts)
        attrs.append((a_name, a_type, req, dflt))
    rec["attrs"] = tuple(attrs)
    return rec


def differences(a, b):
    out = []
    for field in ("deprecated", "counts", "inputs", "outputs", "attrs", "constraints"):
        if a[field] != b[field]:
            out.append("%s: changelog %r, python3-onnx %r" % (field, a[field], b[field]))
    return out


# ---- emitting C --------------------------------------------------------------------------------------

def c_str(s):
    out = ['"']
    for ch in s.encode("utf-8"):
        c = chr(ch)
        if c in '"\\':
            out.append("\\" + c)
        elif 32 <= ch < 127:
            out.append(c)
        else:
            out.append("\\%03o" % ch)
    out.append('"')
    return "".join(out)


def c_float(x):
    r = repr(float(x))
    if r in ("inf", "-inf", "nan"):
        raise ValueError("non-finite default")
    if "e" not in r and "." not in r:
        r += ".0"
    return r + "f"


class Emitter:
    def __init__(self):
        self.pools = {}  # kind -> {tuple: name}
        self.defs = []  # lines of pooled arrays

    def pool(self, kind, ctype, items, fmt):
        """A static const array of items (deduplicated by content); returns its name or NULL."""
        if not items:
            return "NULL"
        key = tuple(items)
        table = self.pools.setdefault(kind, {})
        if key in table:
            return table[key]
        name = "%s_%d" % (kind, len(table))
        table[key] = name
        body = ", ".join(fmt(x) for x in items)
        self.defs.append("static const %s %s[] = {%s};" % (ctype, name, body))
        return name


def emit_entry(em, rec):
    key = rec["key"]

    def param(p):
        name, type_str, types, option, homogeneous, diff = p
        tl = em.pool("ot_tl", "char *const", list(types), c_str)
        return "{%s, %s, %s, %d, %d, %d, %d}" % (c_str(name), c_str(type_str), tl, len(types), option,
                                                  1 if homogeneous else 0, diff)

    ins = em.pool("ot_in", "ot_schema_param", [param(p) for p in rec["inputs"]], str)
    outs = em.pool("ot_out", "ot_schema_param", [param(p) for p in rec["outputs"]], str)

    attrs = []
    for name, atype, required, dv in rec["attrs"]:
        di, df, ds, dl, nl = "0", "0.0f", "NULL", "NULL", 0
        if dv is not None:
            if atype == 2:
                di = "INT64_C(%d)" % dv
            elif atype == 1:
                df = c_float(dv)
            elif atype == 3:
                ds = c_str(dv)
            elif atype == 7:
                dl = "(const void *)" + em.pool("ot_di", "int64_t", list(dv), lambda x: "INT64_C(%d)" % x)
                nl = len(dv)
            elif atype == 6:
                dl = "(const void *)" + em.pool("ot_df", "float", list(dv), c_float)
                nl = len(dv)
            elif atype == 8:
                dl = "(const void *)" + em.pool("ot_ds", "char *const", list(dv), c_str)
                nl = len(dv)
            else:
                raise ValueError("%s.%s: default of type %d not handled" % (key[1], name, atype))
        attrs.append("{%s, %d, %d, %d, %s, %s, %s, %s, %d}" % (
            c_str(name), atype, 1 if required else 0, 0 if dv is None else 1, di, df, ds, dl, nl))
    at = em.pool("ot_at", "ot_schema_attr", attrs, str)

    cons = []
    for param_name, types in rec["constraints"]:
        tl = em.pool("ot_tl", "char *const", list(types), c_str)
        cons.append("{%s, %s, %d}" % (c_str(param_name), tl, len(types)))
    ct = em.pool("ot_tc", "ot_schema_constraint", cons, str)

    mask = 0
    for n in ALLOWED_OUTPUT_COUNTS.get(key, ()):
        mask |= 1 << n
    min_in, max_in, min_out, max_out = rec["counts"]
    return "    {%s, %s, %d, %d, %d, %d, %d, %d, %d, UINT32_C(%d), %d, %d, %d, %d, %s, %s, %s, %s}," % (
        c_str(key[0]), c_str(key[1]), key[2], 1 if rec["deprecated"] else 0, 1 if key in UNCHECKED_ATTRS else 0,
        min_in, max_in, min_out, max_out, mask, len(rec["inputs"]), len(rec["outputs"]), len(attrs), len(cons),
        ins, outs, at, ct)


def main():
    args = sys.argv[1:]
    spec = DEFAULT_SPEC
    if "--spec" in args:
        i = args.index("--spec")
        spec = args[i + 1]
        del args[i:i + 2]
    out_path = args[0] if args else os.path.join(ROOT, "src", "check", "schema_data.c")

    python = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in DOMAINS:
            r = record_from_python(s)
            python[r["key"]] = r
    history = {}
    for r in sorted(python.values(), key=lambda r: r["key"][2]):
        history.setdefault(r["key"][:2], []).append(r)

    records = {}
    for md in ("Changelog.md", "Changelog-ml.md"):
        for s in parse_changelog(os.path.join(spec, md)):
            r = resolve_floats(record_from_changelog(s), history)
            if r["key"] in records:
                raise ValueError("%s-%d listed twice" % r["key"][1:])
            records[r["key"]] = r

    # Agreement: every version python3-onnx knows must be in the changelog, equal field by field.
    both, problems, notes = 0, [], []
    for key, pr in sorted(python.items()):
        cr = records.get(key)
        label = "%s-%d (domain '%s')" % (key[1], key[2], key[0])
        if cr is None:
            problems.append(label + ": in python3-onnx, not in the changelog")
            continue
        both += 1
        if cr["deprecated"] and pr["deprecated"] and not cr["inputs"] and not cr["outputs"]:
            # The changelog prints no body for a deprecated version: keep python3-onnx's, so kernels
            # and shape rules still find the attribute defaults of models written before.
            records[key] = pr
            notes.append(label + ": deprecated, the changelog has no body; python3-onnx's is used")
            continue
        diff = differences(cr, pr)
        if key in REVISED_SINCE_1_12:
            if not diff:
                problems.append(label + ": listed in REVISED_SINCE_1_12 but equal now")
            notes.append("%s: revised after 1.12 (%s); ONNX 1.23's is used" % (label, REVISED_SINCE_1_12[key]))
            continue
        for d in diff:
            problems.append("%s: %s" % (label, d))
    if problems:
        for p in problems:
            print("disagreement: " + p, file=sys.stderr)
        sys.exit("gen_schemas.py: the changelog and python3-onnx %s disagree on %d points (see above)"
                 % (onnx.__version__, len(problems)))

    for n in notes:
        print("note: " + n)

    for key, source in ORT_SCHEMAS.items():
        if key in records:
            raise ValueError("%s-%d: ONNX defines it now, drop it from ORT_SCHEMAS" % key[1:])
        records[key] = dict(records[source], key=key)

    # Sorted by (domain, name, since_version): ot_schema_find does a binary search.
    ordered = sorted(records.values(), key=lambda r: (r["key"][0].encode(), r["key"][1].encode(), r["key"][2]))
    em = Emitter()
    entries = [emit_entry(em, r) for r in ordered]
    by_domain = {}
    max_opset = {}
    for r in ordered:
        d = r["key"][0]
        by_domain[d] = by_domain.get(d, 0) + 1
        max_opset[d] = max(max_opset.get(d, 0), r["key"][2])
    counts = ", ".join("%s %d" % (d or "ai.onnx", by_domain[d]) for d in DOMAINS)

    lines = [
        "/* GENERATED by tools/gen_schemas.py from ONNX %s's Changelog.md and Changelog-ml.md, checked against"
        % SPEC_VERSION,
        " * python3-onnx %s: of the %d versions in both, %d equal and %d explained differences (see the" % (
            onnx.__version__, both, both - len(notes), len(notes)),
        " * generator's REVISED_SINCE_1_12 and deprecated versions). Do not edit.",
        " * Regenerate: /usr/bin/python3 tools/gen_schemas.py (writes src/check/schema_data.c).",
        " * %d operator schema versions (%s)," % (len(entries), counts),
        " * %d of them from ONNX Runtime's contrib schemas (ORT_SCHEMAS)." % len(ORT_SCHEMAS),
        " * Sorted by (domain, name, since_version). Layout: src/check/schema.h. */",
        "/* clang-format off */",
        "#include \"check/schema.h\"",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
    ]
    lines += em.defs
    lines.append("")
    lines.append("const ot_schema ot_schema_table[] = {")
    lines += entries
    lines.append("};")
    lines.append("const size_t ot_schema_table_count = %d;" % len(entries))
    lines.append("const char ot_schema_onnx_version[] = %s;" % c_str(SPEC_VERSION))
    lines.append("const ot_schema_domain ot_schema_domains[] = {")
    for d in DOMAINS:
        lines.append("    {%s, %d}," % (c_str(d), max_opset[d]))
    lines.append("};")
    lines.append("const size_t ot_schema_domain_count = %d;" % len(DOMAINS))
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %d schemas (%s); python3-onnx %s: %d versions in both, %d equal, %d explained"
          % (out_path, len(entries), counts, onnx.__version__, both, both - len(notes), len(notes)))


if __name__ == "__main__":
    main()
