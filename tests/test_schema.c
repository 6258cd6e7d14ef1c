/* The generated operator schema table: lookups by opset, counts, attributes, parameters. */
#include <string.h>

#include "check/schema.h"
#include "testutil.h"

static int since(const char *domain, const char *op, int64_t opset) {
    const ot_schema *s = ot_schema_find(domain, op, opset);
    return s ? (int)s->since_version : -1;
}

static void check_since(const char *domain, const char *op, int64_t opset, int want) {
    int got = since(domain, op, opset);
    printf("  %s%s%s @ opset %lld -> since_version %d (expected %d)\n", domain ? domain : "",
           domain && *domain ? "." : "", op, (long long)opset, got, want);
    CHECK(got == want);
}

int main(void) {
    printf("schema table: %zu entries, generated from onnx %s\n", ot_schema_table_count, ot_schema_onnx_version);
    CHECK(ot_schema_table_count == 642);
    CHECK(strcmp(ot_schema_onnx_version, "1.23") == 0);

    /* Sorted by (domain, name, since_version): binary search depends on it. */
    size_t unsorted = 0, per_domain[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < ot_schema_table_count; i++) {
        const ot_schema *s = &ot_schema_table[i];
        if (strcmp(s->domain, "") == 0)
            per_domain[0]++;
        else if (strcmp(s->domain, "ai.onnx.ml") == 0)
            per_domain[1]++;
        else if (strcmp(s->domain, "ai.onnx.preview.training") == 0)
            per_domain[2]++;
        else if (strcmp(s->domain, "ai.onnx.preview") == 0)
            per_domain[3]++;
        if (i == 0) continue;
        const ot_schema *p = &ot_schema_table[i - 1];
        int c = strcmp(p->domain, s->domain);
        if (c == 0) c = strcmp(p->name, s->name);
        if (c > 0 || (c == 0 && p->since_version >= s->since_version)) unsorted++;
    }
    printf("per domain: ai.onnx %zu, ai.onnx.ml %zu, ai.onnx.preview.training %zu, ai.onnx.preview %zu; out of order "
           "%zu\n",
           per_domain[0], per_domain[1], per_domain[2], per_domain[3], unsorted);
    /* ai.onnx: ONNX 1.23's 611 versions and ONNX Runtime's LayerNormalization-1. */
    CHECK(per_domain[0] == 612 && per_domain[1] == 25 && per_domain[2] == 4 && per_domain[3] == 1);
    CHECK(per_domain[0] + per_domain[1] + per_domain[2] + per_domain[3] == ot_schema_table_count);
    CHECK(ot_schema_domain_max_opset("") == 28 && ot_schema_domain_max_opset("ai.onnx.ml") == 5);
    CHECK(ot_schema_domain_max_opset("ai.onnx.preview") == 1 && ot_schema_domain_max_opset("com.example") == 0);
    CHECK(unsorted == 0);

    /* Distinct operators in the default domain at opset 17: python3-onnx 1.12 has 178 names, 176 not deprecated
     * (Upsample, Scatter are). */
    size_t ops17 = 0;
    for (size_t i = 0; i < ot_schema_table_count; i++) {
        const ot_schema *s = &ot_schema_table[i];
        if (strcmp(s->domain, "") != 0) continue;
        if (ot_schema_find("", s->name, 17) == s && !s->deprecated) ops17++;
    }
    printf("ai.onnx operators available at opset 17: %zu\n", ops17);
    CHECK(ops17 == 176);

    printf("lookups by opset:\n");
    check_since("", "Reshape", 1, 1);
    check_since("", "Reshape", 4, 1);
    check_since("", "Reshape", 5, 5);
    check_since("", "Reshape", 13, 13);
    check_since("", "Reshape", 17, 14);
    check_since("", "ReduceSum", 11, 11);
    check_since("", "ReduceSum", 12, 11);
    check_since("", "ReduceSum", 13, 13);
    check_since(NULL, "Relu", 13, 13);
    check_since("ai.onnx", "Relu", 14, 14);
    check_since("", "HardSwish", 13, -1);
    check_since("", "HardSwish", 14, 14);
    check_since("", "NoSuchOp", 17, -1);
    check_since("ai.onnx.ml", "LabelEncoder", 2, 2);
    check_since("ai.onnx.ml", "LabelEncoder", 1, 1);
    check_since("ai.onnx.preview.training", "Adam", 1, 1);
    check_since("com.example", "Relu", 13, -1);
    check_since("", "Gemm", 0, -1);
    check_since("", "Reshape", 28, 25);
    check_since("", "Attention", 23, 23);
    check_since("", "Attention", 22, -1);
    check_since("ai.onnx.preview", "FlexAttention", 1, 1);
    /* ONNX Runtime's contrib LayerNormalization (default domain, any opset) below ONNX's 17. */
    check_since("", "LayerNormalization", 14, 1);
    check_since("", "LayerNormalization", 17, 17);
    const ot_schema *ln1 = ot_schema_find("", "LayerNormalization", 1);
    const ot_schema *ln17 = ot_schema_find("", "LayerNormalization", 17);
    CHECK(ln1 && ln17 && ln1->n_inputs == ln17->n_inputs && ln1->n_attrs == ln17->n_attrs &&
          ln1->max_outputs == ln17->max_outputs);
    /* New element types are spelled as Operators.md spells them. */
    const ot_schema *cast25 = ot_schema_find("", "Cast", 25);
    const ot_schema_param *cast_in = cast25 ? ot_schema_input(cast25, 0) : NULL;
    CHECK(cast_in && ot_schema_param_allows(cast_in, "tensor(float8e4m3fn)") &&
          ot_schema_param_allows(cast_in, "tensor(int4)") && ot_schema_param_allows(cast_in, "tensor(float4e2m1)") &&
          ot_schema_param_allows(cast_in, "tensor(int2)"));
    /* Float defaults are exact where python3-onnx knows the attribute: Selu-22's alpha is Selu-6's. */
    const ot_schema_attr *alpha22 = ot_schema_attr_find(ot_schema_find("", "Selu", 22), "alpha");
    const ot_schema_attr *alpha6 = ot_schema_attr_find(ot_schema_find("", "Selu", 6), "alpha");
    CHECK(alpha22 && alpha6 && alpha22->def_f == alpha6->def_f && alpha6->def_f != 1.67326f);

    size_t nv = 0;
    const ot_schema *v = ot_schema_versions("", "Reshape", &nv);
    printf("Reshape versions: %zu (first %d)\n", nv, v ? (int)v->since_version : -1);
    CHECK(v && nv == 9 && v[0].since_version == 1 && v[3].since_version == 14 && v[8].since_version == 25);

    /* Reshape-1 has a 'shape' attribute and one input; Reshape-5 takes shape as an input. */
    const ot_schema *r4 = ot_schema_find("", "Reshape", 4), *r13 = ot_schema_find("", "Reshape", 13);
    CHECK(r4 && r13);
    if (r4 && r13) {
        const ot_schema_attr *a = ot_schema_attr_find(r4, "shape");
        printf("Reshape-1: %d..%d inputs, attr shape type %d; Reshape-13: %d..%d inputs, input 1 '%s' types %s\n",
               r4->min_inputs, r4->max_inputs, a ? a->type : -1, r13->min_inputs, r13->max_inputs, r13->inputs[1].name,
               r13->inputs[1].types[0]);
        CHECK(r4->min_inputs == 1 && r4->max_inputs == 1 && a && a->type == OTTER_ATTR_INTS && !a->required);
        CHECK(r13->min_inputs == 2 && r13->max_inputs == 2 && ot_schema_attr_find(r13, "shape") == NULL);
        CHECK(strcmp(r13->inputs[1].name, "shape") == 0 && r13->inputs[1].n_types == 1 &&
              strcmp(r13->inputs[1].types[0], "tensor(int64)") == 0);
        CHECK(ot_schema_param_allows(&r13->inputs[0], "tensor(bfloat16)"));
        CHECK(!ot_schema_param_allows(&r4->inputs[0], "tensor(int64)"));
    }

    /* ReduceSum: axes an attribute at 11, an optional input at 13. */
    const ot_schema *rs11 = ot_schema_find("", "ReduceSum", 11), *rs13 = ot_schema_find("", "ReduceSum", 13);
    CHECK(rs11 && rs13);
    if (rs11 && rs13) {
        const ot_schema_attr *kd = ot_schema_attr_find(rs13, "keepdims");
        printf("ReduceSum-11: %d inputs, axes attr %s; ReduceSum-13: %d..%d inputs, input 1 option %d, keepdims "
               "default %lld\n",
               rs11->max_inputs, ot_schema_attr_find(rs11, "axes") ? "yes" : "no", rs13->min_inputs, rs13->max_inputs,
               rs13->inputs[1].option, kd ? (long long)kd->def_i : -1LL);
        CHECK(rs11->max_inputs == 1 && ot_schema_attr_find(rs11, "axes") != NULL);
        CHECK(rs13->min_inputs == 1 && rs13->max_inputs == 2 && rs13->inputs[1].option == OT_PARAM_OPTIONAL);
        CHECK(ot_schema_attr_find(rs13, "axes") == NULL);
        CHECK(kd && kd->has_default && kd->def_i == 1 && kd->type == OTTER_ATTR_INT);
    }

    /* Variadic, required attributes, constraints, deprecation, allowed output counts. */
    const ot_schema *concat = ot_schema_find("", "Concat", 13);
    CHECK(concat && concat->max_inputs == INT32_MAX && concat->inputs[0].option == OT_PARAM_VARIADIC);
    CHECK(concat && ot_schema_input(concat, 5) == &concat->inputs[0]);
    const ot_schema_attr *axis = concat ? ot_schema_attr_find(concat, "axis") : NULL;
    CHECK(axis && axis->required && axis->type == OTTER_ATTR_INT);
    const ot_schema *cast = ot_schema_find("", "Cast", 13);
    CHECK(cast && ot_schema_attr_find(cast, "to") && ot_schema_attr_find(cast, "to")->required);
    const ot_schema_constraint *t1 = cast ? ot_schema_constraint_find(cast, "T1") : NULL;
    printf("Cast-13: T1 allows %d types\n", t1 ? t1->n_types : -1);
    CHECK(t1 && t1->n_types >= 14);
    const ot_schema *up = ot_schema_find("", "Upsample", 10);
    CHECK(up && up->deprecated && up->since_version == 10);
    const ot_schema *bn9 = ot_schema_find("", "BatchNormalization", 9);
    CHECK(bn9 && ot_schema_output_count_ok(bn9, 1) && ot_schema_output_count_ok(bn9, 5));
    CHECK(bn9 && !ot_schema_output_count_ok(bn9, 2) && !ot_schema_output_count_ok(bn9, 6));
    const ot_schema *ln = ot_schema_find("", "LayerNormalization", 17);
    CHECK(ln && ln->unchecked_attrs);
    const ot_schema *lstm = ot_schema_find("", "LSTM", 14);
    const ot_schema_attr *act = lstm ? ot_schema_attr_find(lstm, "activations") : NULL;
    CHECK(act && act->type == OTTER_ATTR_STRINGS);
    const ot_schema *lrn = ot_schema_find("", "LRN", 13);
    const ot_schema_attr *alpha = lrn ? ot_schema_attr_find(lrn, "alpha") : NULL;
    printf("LRN-13 alpha default %g\n", alpha ? alpha->def_f : -1.0);
    CHECK(alpha && alpha->has_default && alpha->def_f > 9.9e-5f && alpha->def_f < 1.01e-4f);

    /* Type strings. */
    otter_type t = {0};
    char buf[64];
    t.kind = OTTER_TYPE_TENSOR;
    t.elem_type = OTTER_DTYPE_FLOAT16;
    t.has_elem_type = true;
    t.rank = -1;
    CHECK(ot_type_string(&t, buf, sizeof buf) && strcmp(buf, "tensor(float16)") == 0);
    otter_type seq = {.kind = OTTER_TYPE_SEQUENCE, .elem = &t, .rank = -1};
    CHECK(ot_type_string(&seq, buf, sizeof buf) && strcmp(buf, "seq(tensor(float16))") == 0);
    printf("type string: %s\n", buf);
    otter_type map = {.kind = OTTER_TYPE_MAP, .elem_type = OTTER_DTYPE_STRING, .has_elem_type = true, .elem = &t};
    CHECK(ot_type_string(&map, buf, sizeof buf) && strcmp(buf, "map(string,tensor(float16))") == 0);
    printf("map type string: %s\n", buf);
    CHECK(!ot_type_string(&map, buf, 10));
    /* The canonical form is what the ML operators' constraints list. */
    const ot_schema *dv = ot_schema_find("ai.onnx.ml", "DictVectorizer", 1);
    CHECK(dv && ot_schema_param_allows(ot_schema_input(dv, 0), "map(string,tensor(float))"));
    otter_type none = {0};
    CHECK(!ot_type_string(&none, buf, sizeof buf));
    return tu_finish("test_schema");
}
