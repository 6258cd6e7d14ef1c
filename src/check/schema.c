/* Lookups over the generated operator schema table (schema_data.c). */
#include "check/schema.h"

#include <stdio.h>
#include <string.h>

static const char *norm_domain(const char *domain) {
    if (domain == NULL || strcmp(domain, "ai.onnx") == 0) return "";
    return domain;
}

static int cmp_key(const ot_schema *s, const char *domain, const char *op) {
    int c = strcmp(s->domain, domain);
    return c ? c : strcmp(s->name, op);
}

/* Index of the first entry with (domain, op) >= the key. */
static size_t lower_bound(const char *domain, const char *op) {
    size_t lo = 0, hi = ot_schema_table_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(&ot_schema_table[mid], domain, op) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const ot_schema *ot_schema_versions(const char *domain, const char *op, size_t *count) {
    if (count) *count = 0;
    if (op == NULL) return NULL;
    domain = norm_domain(domain);
    size_t i = lower_bound(domain, op), j = i;
    while (j < ot_schema_table_count && cmp_key(&ot_schema_table[j], domain, op) == 0) j++;
    if (j == i) return NULL;
    if (count) *count = j - i;
    return &ot_schema_table[i];
}

const ot_schema *ot_schema_find(const char *domain, const char *op, int64_t opset) {
    size_t n = 0;
    const ot_schema *v = ot_schema_versions(domain, op, &n);
    const ot_schema *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (v[i].since_version <= opset) best = &v[i];
    return best;
}

int64_t ot_schema_domain_max_opset(const char *domain) {
    domain = norm_domain(domain);
    for (size_t i = 0; i < ot_schema_domain_count; i++)
        if (strcmp(ot_schema_domains[i].domain, domain) == 0) return ot_schema_domains[i].max_opset;
    return 0;
}

bool ot_schema_domain_known(const char *domain) { return ot_schema_domain_max_opset(domain) > 0; }

const ot_schema_attr *ot_schema_attr_find(const ot_schema *s, const char *name) {
    if (s == NULL || name == NULL) return NULL;
    size_t lo = 0, hi = s->n_attrs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->attrs[mid].name, name);
        if (c == 0) return &s->attrs[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const ot_schema_constraint *ot_schema_constraint_find(const ot_schema *s, const char *param) {
    if (s == NULL || param == NULL) return NULL;
    for (size_t i = 0; i < s->n_constraints; i++)
        if (strcmp(s->constraints[i].param, param) == 0) return &s->constraints[i];
    return NULL;
}

static const ot_schema_param *formal(const ot_schema_param *p, size_t n, size_t index) {
    if (n == 0) return NULL;
    if (index < n) return &p[index];
    if (p[n - 1].option == OT_PARAM_VARIADIC) return &p[n - 1];
    return NULL;
}

const ot_schema_param *ot_schema_input(const ot_schema *s, size_t index) {
    return s ? formal(s->inputs, s->n_inputs, index) : NULL;
}

const ot_schema_param *ot_schema_output(const ot_schema *s, size_t index) {
    return s ? formal(s->outputs, s->n_outputs, index) : NULL;
}

bool ot_schema_input_count_ok(const ot_schema *s, size_t n) {
    return n >= (size_t)s->min_inputs && n <= (size_t)s->max_inputs;
}

bool ot_schema_output_count_ok(const ot_schema *s, size_t n) {
    if (n < (size_t)s->min_outputs || n > (size_t)s->max_outputs) return false;
    if (s->allowed_outputs != 0) return n < 32 && (s->allowed_outputs >> n) & 1u;
    return true;
}

bool ot_schema_param_allows(const ot_schema_param *p, const char *type_str) {
    if (p->n_types == 0) return true;
    size_t lo = 0, hi = p->n_types;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p->types[mid], type_str);
        if (c == 0) return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

const char *ot_type_elem_name(otter_dtype t) {
    static const char *const names[OTTER_DTYPE_COUNT_] = {
        [OTTER_DTYPE_FLOAT] = "float",
        [OTTER_DTYPE_UINT8] = "uint8",
        [OTTER_DTYPE_INT8] = "int8",
        [OTTER_DTYPE_UINT16] = "uint16",
        [OTTER_DTYPE_INT16] = "int16",
        [OTTER_DTYPE_INT32] = "int32",
        [OTTER_DTYPE_INT64] = "int64",
        [OTTER_DTYPE_STRING] = "string",
        [OTTER_DTYPE_BOOL] = "bool",
        [OTTER_DTYPE_FLOAT16] = "float16",
        [OTTER_DTYPE_DOUBLE] = "double",
        [OTTER_DTYPE_UINT32] = "uint32",
        [OTTER_DTYPE_UINT64] = "uint64",
        [OTTER_DTYPE_COMPLEX64] = "complex64",
        [OTTER_DTYPE_COMPLEX128] = "complex128",
        [OTTER_DTYPE_BFLOAT16] = "bfloat16",
        [OTTER_DTYPE_FLOAT8E4M3FN] = "float8e4m3fn",
        [OTTER_DTYPE_FLOAT8E4M3FNUZ] = "float8e4m3fnuz",
        [OTTER_DTYPE_FLOAT8E5M2] = "float8e5m2",
        [OTTER_DTYPE_FLOAT8E5M2FNUZ] = "float8e5m2fnuz",
        [OTTER_DTYPE_UINT4] = "uint4",
        [OTTER_DTYPE_INT4] = "int4",
        [OTTER_DTYPE_FLOAT4E2M1] = "float4e2m1",
        [OTTER_DTYPE_FLOAT8E8M0] = "float8e8m0",
        [OTTER_DTYPE_UINT2] = "uint2",
        [OTTER_DTYPE_INT2] = "int2",
    };
    if ((int)t <= 0 || (int)t >= OTTER_DTYPE_COUNT_) return NULL;
    return names[t];
}

/* Appends to buf at *pos; false when it does not fit. */
static bool put(char *buf, size_t size, size_t *pos, const char *s) {
    size_t n = strlen(s);
    if (*pos + n + 1 > size) return false;
    memcpy(buf + *pos, s, n + 1);
    *pos += n;
    return true;
}

static bool type_str(const otter_type *t, char *buf, size_t size, size_t *pos, int depth) {
    if (t == NULL || depth > 32) return false;
    const char *e;
    switch (t->kind) {
    case OTTER_TYPE_TENSOR:
    case OTTER_TYPE_SPARSE_TENSOR:
        e = t->has_elem_type ? ot_type_elem_name(t->elem_type) : NULL;
        if (e == NULL) return false;
        return put(buf, size, pos, t->kind == OTTER_TYPE_TENSOR ? "tensor(" : "sparse_tensor(") &&
               put(buf, size, pos, e) && put(buf, size, pos, ")");
    case OTTER_TYPE_SEQUENCE:
        return put(buf, size, pos, "seq(") && type_str(t->elem, buf, size, pos, depth + 1) && put(buf, size, pos, ")");
    case OTTER_TYPE_OPTIONAL:
        return put(buf, size, pos, "optional(") && type_str(t->elem, buf, size, pos, depth + 1) &&
               put(buf, size, pos, ")");
    case OTTER_TYPE_MAP:
        e = t->has_elem_type ? ot_type_elem_name(t->elem_type) : NULL;
        if (e == NULL) return false;
        return put(buf, size, pos, "map(") && put(buf, size, pos, e) && put(buf, size, pos, ",") &&
               type_str(t->elem, buf, size, pos, depth + 1) && put(buf, size, pos, ")");
    default:
        return false;
    }
}

bool ot_type_string(const otter_type *t, char *buf, size_t size) {
    size_t pos = 0;
    if (size == 0) return false;
    buf[0] = '\0';
    if (!type_str(t, buf, size, &pos, 0)) {
        buf[0] = '\0';
        return false;
    }
    return true;
}
