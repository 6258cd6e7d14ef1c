#!/usr/bin/python3
"""Generate src/check/schema_data.c: otter's operator schema table, from python3-onnx's op definitions.

Usage (from the repository root, with Debian's python3 and its python3-onnx):
    /usr/bin/python3 tools/gen_schemas.py [output path, default src/check/schema_data.c]

Covers every schema version of the domains "" (ai.onnx, up to opset 17), ai.onnx.ml and
ai.onnx.preview.training from onnx.defs.get_all_schemas_with_history(). The layout of the emitted
structs is declared in src/check/schema.h. Two facts the Python bindings do not expose are copied
by hand from onnx's C++ definitions (onnx/defs/*.cc), see UNCHECKED_ATTRS and ALLOWED_OUTPUT_COUNTS.
"""

import os
import sys

import onnx
import onnx.defs

DOMAINS = {"": 17, "ai.onnx.ml": None, "ai.onnx.preview.training": None}

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

INT_MAX = 2147483647


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


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src", "check", "schema_data.c")
    schemas = []
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain not in DOMAINS:
            continue
        limit = DOMAINS[s.domain]
        if limit is not None and s.since_version > limit:
            continue
        schemas.append(s)
    # Sorted by (domain, name, since_version): ot_schema_find does a binary search.
    schemas.sort(key=lambda s: (s.domain.encode(), s.name.encode(), s.since_version))

    em = Emitter()
    entries = []
    for s in schemas:
        key = (s.domain, s.name, s.since_version)
        constraints = {c.type_param_str: sorted(c.allowed_type_strs) for c in s.type_constraints}

        def param(p):
            types = sorted(p.types) if p.types else constraints.get(p.typeStr, [])
            tl = em.pool("ot_tl", "char *const", types, c_str)
            return "{%s, %s, %s, %d, %d, %s, %d}" % (
                c_str(p.name), c_str(p.typeStr), tl, len(types), int(p.option.value),
                1 if p.isHomogeneous else 0, int(p.differentiationCategory.value))

        ins = em.pool("ot_in", "ot_schema_param", [param(p) for p in s.inputs], str)
        outs = em.pool("ot_out", "ot_schema_param", [param(p) for p in s.outputs], str)

        attrs = []
        for name in sorted(s.attributes):
            a = s.attributes[name]
            dv = a.default_value
            has_def = dv.type != 0
            di, df, ds, dl, nl = "0", "0.0f", "NULL", "NULL", 0
            if dv.type == onnx.AttributeProto.INT:
                di = "INT64_C(%d)" % dv.i
            elif dv.type == onnx.AttributeProto.FLOAT:
                df = c_float(dv.f)
            elif dv.type == onnx.AttributeProto.STRING:
                ds = c_str(dv.s.decode("utf-8"))
            elif dv.type == onnx.AttributeProto.INTS:
                dl = em.pool("ot_di", "int64_t", list(dv.ints), lambda x: "INT64_C(%d)" % x)
                dl = "(const void *)" + dl
                nl = len(dv.ints)
            elif dv.type == onnx.AttributeProto.FLOATS:
                dl = em.pool("ot_df", "float", list(dv.floats), c_float)
                dl = "(const void *)" + dl
                nl = len(dv.floats)
            elif dv.type == onnx.AttributeProto.STRINGS:
                dl = em.pool("ot_ds", "char *const", [x.decode("utf-8") for x in dv.strings], c_str)
                dl = "(const void *)" + dl
                nl = len(dv.strings)
            elif has_def:
                raise ValueError("%s.%s: default of type %d not handled" % (s.name, name, dv.type))
            attrs.append("{%s, %d, %d, %d, %s, %s, %s, %s, %d}" % (
                c_str(name), int(a.type.value), 1 if a.required else 0, 1 if has_def else 0,
                di, df, ds, dl, nl))
        at = em.pool("ot_at", "ot_schema_attr", attrs, str)

        cons = []
        for c in s.type_constraints:
            tl = em.pool("ot_tl", "char *const", sorted(c.allowed_type_strs), c_str)
            cons.append("{%s, %s, %d}" % (c_str(c.type_param_str), tl, len(c.allowed_type_strs)))
        ct = em.pool("ot_tc", "ot_schema_constraint", cons, str)

        mask = 0
        for n in ALLOWED_OUTPUT_COUNTS.get(key, ()):
            mask |= 1 << n
        max_in = min(s.max_input, INT_MAX)
        max_out = min(s.max_output, INT_MAX)
        entries.append(
            "    {%s, %s, %d, %d, %d, %d, %d, %d, %d, UINT32_C(%d), %d, %d, %d, %d, %s, %s, %s, %s}," % (
                c_str(s.domain), c_str(s.name), s.since_version, 1 if s.deprecated else 0,
                1 if key in UNCHECKED_ATTRS else 0, s.min_input, max_in, s.min_output, max_out, mask,
                len(s.inputs), len(s.outputs), len(attrs), len(cons), ins, outs, at, ct))

    lines = [
        "/* GENERATED by tools/gen_schemas.py from python3-onnx %s; do not edit." % onnx.__version__,
        " * Regenerate: /usr/bin/python3 tools/gen_schemas.py (writes src/check/schema_data.c).",
        " * %d operator schema versions of ai.onnx (opset <= 17), ai.onnx.ml and ai.onnx.preview.training,"
        % len(schemas),
        " * sorted by (domain, name, since_version). Layout: src/check/schema.h. */",
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
    lines.append("const char ot_schema_onnx_version[] = %s;" % c_str(onnx.__version__))
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %d schemas" % (out_path, len(entries)))


if __name__ == "__main__":
    main()
