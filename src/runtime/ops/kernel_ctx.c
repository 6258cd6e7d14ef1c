/* Input checks every kernel family shares (declared in runtime/op.h). */
#include "check/schema.h"
#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"

const char *ot_ctx_input_name(const ot_kernel_ctx *ctx, size_t i) {
    if (!ctx->node || i >= ctx->node->n_inputs || !ctx->node->inputs[i]) return "";
    return ctx->node->inputs[i];
}

otter_status ot_ctx_need_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t) {
    *t = ot_ctx_input(ctx, i);
    if (!*t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
    return OTTER_OK;
}

otter_status ot_ctx_bad_type(const ot_kernel_ctx *ctx, size_t i, otter_dtype t) {
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input %zu '%s' has type %s, which %s does not support", i,
                        ot_ctx_input_name(ctx, i), otter_dtype_name(t), ctx->node->op_type);
}

otter_status ot_ctx_float_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t) {
    OT_TRY(ot_ctx_need_input(ctx, i, t));
    if (!otter_dtype_is_float((*t)->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has element type %s, expected a floating type", i,
                            ot_ctx_input_name(ctx, i), otter_dtype_name((*t)->dtype));
    return OTTER_OK;
}

otter_status ot_ctx_input_f32(const ot_kernel_ctx *ctx, size_t idx, const otter_tensor *t, const float **out,
                              float **tmp) {
    *tmp = NULL;
    if (t->dtype == OTTER_DTYPE_FLOAT) {
        *out = t->data;
        return OTTER_OK;
    }
    int64_t n = otter_tensor_numel(t);
    float *f = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!f) return OT_NOMEM();
    if (!ot_convert(f, OTTER_DTYPE_FLOAT, t->data, t->dtype, n)) {
        ot_free(f);
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input %zu '%s': dtype %s not supported", idx,
                            ot_ctx_input_name(ctx, idx), otter_dtype_name(t->dtype));
    }
    *out = f;
    *tmp = f;
    return OTTER_OK;
}

otter_status ot_output_f32(otter_tensor *y, float **out, float **tmp) {
    *tmp = NULL;
    if (y->dtype == OTTER_DTYPE_FLOAT) {
        *out = y->data;
        return OTTER_OK;
    }
    int64_t n = otter_tensor_numel(y);
    *tmp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!*tmp) return OT_NOMEM();
    *out = *tmp;
    return OTTER_OK;
}

void ot_output_f32_done(otter_tensor *y, float *tmp) {
    if (!tmp) return;
    if (y) ot_convert(y->data, y->dtype, tmp, OTTER_DTYPE_FLOAT, otter_tensor_numel(y));
    ot_free(tmp);
}

/* The node's attribute when set (of the expected type), else the schema's entry for it, which has a
 * default: one of the two is stored in *set / *def, or an error naming the node and the attribute. */
static otter_status attr_lookup(const ot_kernel_ctx *ctx, const char *name, otter_attr_type type,
                                const otter_attr **set, const ot_schema_attr **def) {
    *set = otter_node_attr(ctx->node, name);
    *def = NULL;
    if (*set) {
        if ((*set)->type != type)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' has type %s, expected %s", name,
                                otter_attr_type_name((*set)->type), otter_attr_type_name(type));
        return OTTER_OK;
    }
    const ot_schema_attr *a = ot_schema_attr_find(ctx->schema, name);
    if (!a && ctx->schema) {
        /* An attribute a later version of the operator introduced: its default there is the behaviour
         * the versions before it had (MaxPool-1 has no ceil_mode: MaxPool-10's default 0). */
        size_t n = 0;
        const ot_schema *v = ot_schema_versions(ctx->schema->domain, ctx->schema->name, &n);
        for (size_t k = (size_t)(ctx->schema - v) + 1; !a && k < n; k++) a = ot_schema_attr_find(&v[k], name);
    }
    if (!a)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' is not set and no schema of %s gives it a default",
                            name, ctx->node->op_type);
    if (a->type != type)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' read as %s, the schema has it as %s", name,
                            otter_attr_type_name(type), otter_attr_type_name((otter_attr_type)a->type));
    if (a->required || !a->has_default)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "required attribute '%s' is missing", name);
    *def = a;
    return OTTER_OK;
}

otter_status ot_ctx_attr_int(const ot_kernel_ctx *ctx, const char *name, int64_t *v) {
    const otter_attr *set;
    const ot_schema_attr *def;
    OT_TRY(attr_lookup(ctx, name, OTTER_ATTR_INT, &set, &def));
    *v = set ? set->i : def->def_i;
    return OTTER_OK;
}

otter_status ot_ctx_attr_float(const ot_kernel_ctx *ctx, const char *name, float *v) {
    const otter_attr *set;
    const ot_schema_attr *def;
    OT_TRY(attr_lookup(ctx, name, OTTER_ATTR_FLOAT, &set, &def));
    *v = set ? set->f : def->def_f;
    return OTTER_OK;
}

otter_status ot_ctx_attr_string(const ot_kernel_ctx *ctx, const char *name, const char **v) {
    const otter_attr *set;
    const ot_schema_attr *def;
    OT_TRY(attr_lookup(ctx, name, OTTER_ATTR_STRING, &set, &def));
    *v = set ? (set->s.data ? set->s.data : "") : def->def_s;
    return OTTER_OK;
}

otter_status ot_ctx_attr_ints(const ot_kernel_ctx *ctx, const char *name, const int64_t **v, size_t *n) {
    const otter_attr *set;
    const ot_schema_attr *def;
    OT_TRY(attr_lookup(ctx, name, OTTER_ATTR_INTS, &set, &def));
    *v = set ? set->ints : (const int64_t *)def->def_list;
    *n = set ? set->n_ints : def->def_count;
    return OTTER_OK;
}
