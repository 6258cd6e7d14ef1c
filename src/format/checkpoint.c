/* ONNX Runtime's training checkpoint (see specs/ort-training-format.md, "Checkpoint"): the state and its
 * accessors, and the semantic rules (unique names, an optimizer state for every trainable parameter,
 * momentums shaped like their parameter, ...) that both the reader (checkpoint_read.c, after parsing) and the
 * writer (checkpoint_write.c, before writing) check, so whatever loads can be saved again. */
#include <string.h>

#include "core/core.h"
#include "format/checkpoint_internal.h"

#define DEFAULT_GROUP "group0"

/* ==== state: life cycle and helpers ========================================================== */

static void tensor_list_free(ot_tensor_list *l) {
    for (size_t i = 0; i < l->n; i++) otter_tensor_free(l->v[i]);
    ot_free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static void state_free(otter_param_optimizer_state *s) {
    for (size_t i = 0; i < s->n_momentums; i++) otter_tensor_free(s->momentums[i]);
    ot_free(s->momentums);
    ot_free(s->param_name);
}

static void group_free(otter_optimizer_group *g) {
    for (size_t i = 0; i < g->n_states; i++) state_free(&g->states[i]);
    ot_free(g->states);
    ot_free(g->name);
}

static void property_free(otter_property *p) {
    ot_free(p->name);
    ot_free(p->s);
}

otter_status otter_checkpoint_create(otter_checkpoint **out) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_create: out is NULL");
    *out = ot_calloc(1, sizeof **out);
    if (!*out) return OT_NOMEM();
    (*out)->version = OTTER_CHECKPOINT_VERSION;
    return OTTER_OK;
}

void otter_checkpoint_clear_optimizer_state(otter_checkpoint *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_groups; i++) group_free(&c->groups[i]);
    ot_free(c->groups);
    c->groups = NULL;
    c->n_groups = c->cap_groups = 0;
}

void otter_checkpoint_free(otter_checkpoint *c) {
    if (!c) return;
    tensor_list_free(&c->params[0]);
    tensor_list_free(&c->params[1]);
    otter_checkpoint_clear_optimizer_state(c);
    for (size_t i = 0; i < c->n_props; i++) property_free(&c->props[i]);
    ot_free(c->props);
    ot_free(c);
}

int otter_checkpoint_version(const otter_checkpoint *c) { return c ? c->version : 0; }
bool otter_checkpoint_is_nominal(const otter_checkpoint *c) { return c && c->nominal; }

static bool same_shape(const otter_tensor *a, const otter_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

/* "[200, 784]" into buf. */
const char *ot_ckpt_shape_str(const otter_tensor *t, char *buf, size_t cap) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < t->rank && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* A tensor with no values: data NULL. */
static void drop_data(otter_tensor *t) {
    if (t->owns_data && t->data) {
        if (t->dtype == OTTER_DTYPE_STRING) {
            otter_bytes *s = t->data;
            for (int64_t i = 0, n = otter_tensor_numel(t); i < n; i++) ot_free(s[i].data);
        }
        ot_free(t->data);
    }
    t->data = NULL;
    t->owns_data = false;
}

/* Copy of src (name replaced by name when given); without values when nominal. */
static otter_status copy_tensor(otter_tensor **out, const otter_tensor *src, const char *name, bool nominal) {
    if (nominal || !src->data) return ot_tensor_shell(out, name ? name : src->name, src->dtype, src->rank, src->dims);
    return otter_tensor_from_data(out, name ? name : src->name, src->dtype, src->rank, src->dims, src->data);
}

static bool has_values(const otter_tensor *t) { return t->data != NULL || otter_tensor_numel(t) == 0; }

otter_status ot_ckpt_list_push(ot_tensor_list *l, otter_tensor *t) {
    otter_status s = ot_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v);
    if (s != OTTER_OK) return s;
    l->v[l->n++] = t;
    return OTTER_OK;
}

/* ==== accessors: parameters ================================================================== */

size_t otter_checkpoint_param_count(const otter_checkpoint *c, otter_param_kind kind) {
    if (!c || (kind != OTTER_PARAM_TRAINABLE && kind != OTTER_PARAM_FROZEN)) return 0;
    return c->params[kind].n;
}

const otter_tensor *otter_checkpoint_param_at(const otter_checkpoint *c, otter_param_kind kind, size_t i) {
    if (i >= otter_checkpoint_param_count(c, kind)) return NULL;
    return c->params[kind].v[i];
}

static otter_tensor *find_param(const otter_checkpoint *c, const char *name, int *kind, size_t *index) {
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < c->params[k].n; i++)
            if (ot_streq(c->params[k].v[i]->name, name)) {
                if (kind) *kind = k;
                if (index) *index = i;
                return c->params[k].v[i];
            }
    return NULL;
}

otter_status otter_checkpoint_get_param(const otter_checkpoint *c, const char *name, const otter_tensor **out,
                                        otter_param_kind *kind) {
    if (!c || !name || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_get_param: NULL argument");
    int k = 0;
    *out = find_param(c, name, &k, NULL);
    if (!*out) return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no parameter '%s'", name);
    if (kind) *kind = (otter_param_kind)k;
    return OTTER_OK;
}

otter_status otter_checkpoint_add_param(otter_checkpoint *c, otter_param_kind kind, const otter_tensor *t) {
    if (!c || !t || (kind != OTTER_PARAM_TRAINABLE && kind != OTTER_PARAM_FROZEN))
        return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_add_param: bad argument");
    if (ot_str_empty(t->name)) return ot_error(OTTER_ERR_ARGUMENT, "checkpoint parameters need a name");
    if (find_param(c, t->name, NULL, NULL))
        return ot_error(OTTER_ERR_ARGUMENT, "checkpoint already has a parameter '%s'", t->name);
    if (!c->nominal && !has_values(t))
        return ot_error(OTTER_ERR_ARGUMENT, "parameter '%s' has no data (the checkpoint is not nominal)", t->name);
    otter_tensor *copy = NULL;
    OT_TRY(copy_tensor(&copy, t, NULL, c->nominal));
    otter_status s = ot_ckpt_list_push(&c->params[kind], copy);
    if (s != OTTER_OK) otter_tensor_free(copy);
    return s;
}

otter_status otter_checkpoint_set_param(otter_checkpoint *c, const char *name, const otter_tensor *t) {
    if (!c || !name || !t) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_set_param: NULL argument");
    int k;
    size_t i;
    otter_tensor *p = find_param(c, name, &k, &i);
    if (!p) return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no parameter '%s'", name);
    char a[160], b[160];
    if (!same_shape(p, t))
        return ot_error(OTTER_ERR_ARGUMENT, "parameter '%s' is %s %s, the new value is %s %s", name,
                        otter_dtype_name(p->dtype), ot_ckpt_shape_str(p, a, sizeof a), otter_dtype_name(t->dtype),
                        ot_ckpt_shape_str(t, b, sizeof b));
    if (!has_values(t)) return ot_error(OTTER_ERR_ARGUMENT, "new value of parameter '%s' has no data", name);
    otter_tensor *copy = NULL;
    OT_TRY(copy_tensor(&copy, t, name, false));
    otter_tensor_free(p);
    c->params[k].v[i] = copy;
    return OTTER_OK;
}

otter_status ot_ckpt_view_param(otter_checkpoint *c, const char *name, void *data) {
    otter_tensor *p = find_param(c, name, NULL, NULL);
    if (!p) return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no parameter '%s'", name);
    if (p->data == data) return OTTER_OK;
    if (p->dtype == OTTER_DTYPE_STRING)
        return ot_error(OTTER_ERR_ARGUMENT, "parameter '%s': string tensors can't borrow their data", name);
    drop_data(p);
    p->data = data;
    return OTTER_OK;
}

/* A copy of t's borrowed data, owned by t; out of memory, no data at all (never a dangling view). */
static void own_data(otter_tensor *t, otter_status *st) {
    if (!t->data || t->owns_data) return;
    size_t n = otter_tensor_nbytes(t);
    void *copy = ot_malloc(n ? n : 1);
    if (copy) memcpy(copy, t->data, n);
    if (!copy && *st == OTTER_OK) *st = OT_NOMEM();
    t->data = copy;
    t->owns_data = copy != NULL;
}

otter_status ot_ckpt_own_data(otter_checkpoint *c) {
    otter_status st = OTTER_OK;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < c->params[k].n; i++) own_data(c->params[k].v[i], &st);
    for (size_t g = 0; g < c->n_groups; g++)
        for (size_t j = 0; j < c->groups[g].n_states; j++)
            for (size_t m = 0; m < c->groups[g].states[j].n_momentums; m++)
                own_data(c->groups[g].states[j].momentums[m], &st);
    return st;
}

otter_status otter_checkpoint_remove_param(otter_checkpoint *c, const char *name) {
    if (!c || !name) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_remove_param: NULL argument");
    int k;
    size_t i;
    otter_tensor *p = find_param(c, name, &k, &i);
    if (!p) return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no parameter '%s'", name);
    otter_tensor_free(p);
    ot_tensor_list *l = &c->params[k];
    memmove(l->v + i, l->v + i + 1, (l->n - i - 1) * sizeof *l->v);
    l->n--;
    for (size_t g = 0; g < c->n_groups; g++) {
        otter_optimizer_group *gr = &c->groups[g];
        for (size_t j = 0; j < gr->n_states; j++)
            if (ot_streq(gr->states[j].param_name, name)) {
                state_free(&gr->states[j]);
                memmove(gr->states + j, gr->states + j + 1, (gr->n_states - j - 1) * sizeof *gr->states);
                gr->n_states--;
                break;
            }
    }
    return OTTER_OK;
}

otter_status otter_checkpoint_set_nominal(otter_checkpoint *c, bool nominal) {
    if (!c) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_set_nominal: NULL checkpoint");
    if (nominal) {
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < c->params[k].n; i++) drop_data(c->params[k].v[i]);
        for (size_t g = 0; g < c->n_groups; g++)
            for (size_t j = 0; j < c->groups[g].n_states; j++)
                for (size_t m = 0; m < c->groups[g].states[j].n_momentums; m++)
                    drop_data(c->groups[g].states[j].momentums[m]);
        c->nominal = true;
        return OTTER_OK;
    }
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < c->params[k].n; i++)
            if (!has_values(c->params[k].v[i]))
                return ot_error(OTTER_ERR_INVALID, "nominal checkpoint: parameter '%s' has not been set",
                                c->params[k].v[i]->name);
    for (size_t g = 0; g < c->n_groups; g++)
        for (size_t j = 0; j < c->groups[g].n_states; j++)
            for (size_t m = 0; m < c->groups[g].states[j].n_momentums; m++)
                if (!has_values(c->groups[g].states[j].momentums[m]))
                    return ot_error(OTTER_ERR_INVALID,
                                    "nominal checkpoint: momentum '%s' of parameter '%s' in group '%s' has not been "
                                    "set",
                                    c->groups[g].states[j].momentums[m]->name, c->groups[g].states[j].param_name,
                                    c->groups[g].name);
    c->nominal = false;
    return OTTER_OK;
}

/* ==== accessors: optimizer state ============================================================= */

size_t otter_checkpoint_group_count(const otter_checkpoint *c) { return c ? c->n_groups : 0; }

const otter_optimizer_group *otter_checkpoint_group_at(const otter_checkpoint *c, size_t i) {
    return c && i < c->n_groups ? &c->groups[i] : NULL;
}

static otter_optimizer_group *find_group(const otter_checkpoint *c, const char *name) {
    for (size_t i = 0; i < c->n_groups; i++)
        if (ot_streq(c->groups[i].name, name)) return &c->groups[i];
    return NULL;
}

otter_status otter_checkpoint_get_group(const otter_checkpoint *c, const char *group,
                                        const otter_optimizer_group **out) {
    if (!c || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_get_group: NULL argument");
    if (!group) group = DEFAULT_GROUP;
    *out = find_group(c, group);
    if (!*out) return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no optimizer group '%s'", group);
    return OTTER_OK;
}

static otter_status add_group(otter_checkpoint *c, const char *name, otter_optimizer_group **out) {
    OT_TRY(ot_grow((void **)&c->groups, &c->cap_groups, c->n_groups + 1, sizeof *c->groups));
    otter_optimizer_group *g = &c->groups[c->n_groups];
    memset(g, 0, sizeof *g);
    if (!(g->name = ot_strdup(name))) return OT_NOMEM();
    c->n_groups++;
    *out = g;
    return OTTER_OK;
}

otter_status otter_checkpoint_set_group(otter_checkpoint *c, const char *group, int64_t step,
                                        float initial_learning_rate) {
    if (!c) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_set_group: NULL checkpoint");
    if (!group) group = DEFAULT_GROUP;
    if (!group[0]) return ot_error(OTTER_ERR_ARGUMENT, "optimizer group names can't be empty");
    otter_optimizer_group *g = find_group(c, group);
    if (!g) OT_TRY(add_group(c, group, &g));
    g->step = step;
    g->initial_learning_rate = initial_learning_rate;
    return OTTER_OK;
}

/* A tensor shaped like src whose data is src's, borrowed (the caller keeps it alive while c uses it). */
static otter_status view_tensor(otter_tensor **out, const otter_tensor *src) {
    OT_TRY(ot_tensor_shell(out, src->name, src->dtype, src->rank, src->dims));
    (*out)->data = src->data;
    (*out)->owns_data = false;
    return OTTER_OK;
}

/* otter_checkpoint_add_optimizer_state; view: borrow m's data instead of copying it. */
static otter_status add_momentum(otter_checkpoint *c, const char *group, const char *param, const otter_tensor *m,
                                 bool view) {
    if (!c || !param || !m) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_add_optimizer_state: NULL argument");
    if (!group) group = DEFAULT_GROUP;
    if (!group[0]) return ot_error(OTTER_ERR_ARGUMENT, "optimizer group names can't be empty");
    if (ot_str_empty(m->name))
        return ot_error(OTTER_ERR_ARGUMENT, "optimizer state of '%s': the momentum tensor needs a name", param);
    int k = 0;
    const otter_tensor *p = find_param(c, param, &k, NULL);
    if (!p || k != OTTER_PARAM_TRAINABLE)
        return ot_error(OTTER_ERR_ARGUMENT, "optimizer state for '%s': not a trainable parameter of the checkpoint",
                        param);
    char a[160], b[160];
    if (!same_shape(p, m))
        return ot_error(OTTER_ERR_ARGUMENT, "momentum '%s' of '%s' is %s %s, the parameter is %s %s", m->name, param,
                        otter_dtype_name(m->dtype), ot_ckpt_shape_str(m, a, sizeof a), otter_dtype_name(p->dtype),
                        ot_ckpt_shape_str(p, b, sizeof b));
    if (!c->nominal && !has_values(m))
        return ot_error(OTTER_ERR_ARGUMENT, "momentum '%s' of '%s' has no data", m->name, param);
    otter_tensor *copy = NULL;
    OT_TRY(view && !c->nominal ? view_tensor(&copy, m) : copy_tensor(&copy, m, NULL, c->nominal));
    otter_status s = OTTER_OK;
    otter_optimizer_group *g = find_group(c, group);
    if (!g && (s = add_group(c, group, &g)) != OTTER_OK) goto fail;
    otter_param_optimizer_state *st = NULL;
    for (size_t i = 0; i < g->n_states; i++)
        if (ot_streq(g->states[i].param_name, param)) st = &g->states[i];
    if (!st) {
        otter_param_optimizer_state *v = ot_realloc(g->states, (g->n_states + 1) * sizeof *v);
        if (!v) goto nomem;
        g->states = v;
        st = &v[g->n_states];
        memset(st, 0, sizeof *st);
        if (!(st->param_name = ot_strdup(param))) goto nomem;
        g->n_states++;
    }
    for (size_t i = 0; i < st->n_momentums; i++)
        if (ot_streq(st->momentums[i]->name, m->name)) {
            otter_tensor_free(st->momentums[i]);
            st->momentums[i] = copy;
            return OTTER_OK;
        }
    otter_tensor **mv = ot_realloc(st->momentums, (st->n_momentums + 1) * sizeof *mv);
    if (!mv) goto nomem;
    st->momentums = mv;
    mv[st->n_momentums++] = copy;
    return OTTER_OK;
nomem:
    s = OT_NOMEM();
fail:
    otter_tensor_free(copy);
    return s;
}

otter_status otter_checkpoint_add_optimizer_state(otter_checkpoint *c, const char *group, const char *param,
                                                  const otter_tensor *m) {
    return add_momentum(c, group, param, m, false);
}

otter_status ot_ckpt_view_momentum(otter_checkpoint *c, const char *group, const char *param, const otter_tensor *m) {
    return add_momentum(c, group, param, m, true);
}

otter_status otter_checkpoint_get_optimizer_state(const otter_checkpoint *c, const char *group, const char *param,
                                                  const char *momentum, const otter_tensor **out) {
    if (!c || !param || !momentum || !out)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_get_optimizer_state: NULL argument");
    if (!group) group = DEFAULT_GROUP;
    *out = NULL;
    const otter_optimizer_group *g = find_group(c, group);
    if (!g) return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no optimizer group '%s'", group);
    for (size_t i = 0; i < g->n_states; i++)
        if (ot_streq(g->states[i].param_name, param)) {
            for (size_t j = 0; j < g->states[i].n_momentums; j++)
                if (ot_streq(g->states[i].momentums[j]->name, momentum)) {
                    *out = g->states[i].momentums[j];
                    return OTTER_OK;
                }
            return ot_error(OTTER_ERR_NOT_FOUND, "optimizer group '%s': parameter '%s' has no momentum '%s'", group,
                            param, momentum);
        }
    return ot_error(OTTER_ERR_NOT_FOUND, "optimizer group '%s' has no state for parameter '%s'", group, param);
}

/* ==== accessors: properties ================================================================== */

size_t otter_checkpoint_property_count(const otter_checkpoint *c) { return c ? c->n_props : 0; }

const otter_property *otter_checkpoint_property_at(const otter_checkpoint *c, size_t i) {
    return c && i < c->n_props ? &c->props[i] : NULL;
}

otter_status otter_checkpoint_get_property(const otter_checkpoint *c, const char *name, const otter_property **out) {
    if (!c || !name || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_get_property: NULL argument");
    for (size_t i = 0; i < c->n_props; i++)
        if (ot_streq(c->props[i].name, name)) {
            *out = &c->props[i];
            return OTTER_OK;
        }
    *out = NULL;
    return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no property '%s'", name);
}

/* The property named name, created (as an INT 0) when absent; its old string value is freed. */
static otter_status property_slot(otter_checkpoint *c, const char *name, otter_property **out) {
    if (!c || ot_str_empty(name)) return ot_error(OTTER_ERR_ARGUMENT, "checkpoint properties need a name");
    for (size_t i = 0; i < c->n_props; i++)
        if (ot_streq(c->props[i].name, name)) {
            ot_free(c->props[i].s);
            c->props[i].s = NULL;
            *out = &c->props[i];
            return OTTER_OK;
        }
    OT_TRY(ot_grow((void **)&c->props, &c->cap_props, c->n_props + 1, sizeof *c->props));
    otter_property *p = &c->props[c->n_props];
    memset(p, 0, sizeof *p);
    if (!(p->name = ot_strdup(name))) return OT_NOMEM();
    c->n_props++;
    *out = p;
    return OTTER_OK;
}

otter_status otter_checkpoint_set_property_int(otter_checkpoint *c, const char *name, int64_t value) {
    otter_property *p;
    OT_TRY(property_slot(c, name, &p));
    p->type = OTTER_PROPERTY_INT;
    p->i = value;
    return OTTER_OK;
}

otter_status otter_checkpoint_set_property_float(otter_checkpoint *c, const char *name, float value) {
    otter_property *p;
    OT_TRY(property_slot(c, name, &p));
    p->type = OTTER_PROPERTY_FLOAT;
    p->f = value;
    return OTTER_OK;
}

otter_status otter_checkpoint_set_property_string(otter_checkpoint *c, const char *name, const char *value) {
    if (!value) return ot_error(OTTER_ERR_ARGUMENT, "property '%s': NULL string value", name ? name : "");
    char *s = ot_strdup(value);
    if (!s) return OT_NOMEM();
    otter_property *p;
    otter_status st = property_slot(c, name, &p);
    if (st != OTTER_OK) {
        ot_free(s);
        return st;
    }
    p->type = OTTER_PROPERTY_STRING;
    p->s = s;
    return OTTER_OK;
}

/* ==== validation (shared by reader and writer) =============================================== */

int ot_ckpt_cmp_named(const void *a, const void *b) {
    const ot_named *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Sort names; OTTER_ERR_INVALID naming the first duplicate (what: "parameter"). */
static otter_status sort_unique(ot_named *v, size_t n, const char *what, const char *where) {
    if (n > 1) qsort(v, n, sizeof *v, ot_ckpt_cmp_named);
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0)
            return ot_error(OTTER_ERR_INVALID, "%s%s%s '%s' appears twice", where, where[0] ? ": " : "", what,
                            v[i].name);
    return OTTER_OK;
}

static const ot_named *lookup(const ot_named *v, size_t n, const char *name) {
    ot_named key = {name, NULL};
    return n ? bsearch(&key, v, n, sizeof *v, ot_ckpt_cmp_named) : NULL;
}

static otter_status check_tensor(const otter_tensor *t, const char *what, bool nominal) {
    if (ot_str_empty(t->name)) return ot_error(OTTER_ERR_INVALID, "%s has no name", what);
    if ((int)t->dtype <= 0 || t->dtype >= OTTER_DTYPE_COUNT_)
        return ot_error(OTTER_ERR_INVALID, "%s '%s': invalid element type %d", what, t->name, (int)t->dtype);
    /* ONNX Runtime's checkpoints hold training state, which the narrow types (packed in its files
     * as in TensorProto) never are */
    if (t->dtype >= OTTER_DTYPE_FLOAT8E4M3FN)
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s '%s': element type %s is not supported in checkpoints", what,
                        t->name, otter_dtype_name(t->dtype));
    if (!nominal && !has_values(t))
        return ot_error(OTTER_ERR_INVALID, "%s '%s' has no data and the checkpoint is not nominal", what, t->name);
    return OTTER_OK;
}

static otter_status validate_groups(const otter_checkpoint *c, const ot_named *params, size_t n_params) {
    size_t n_trainable = c->params[OTTER_PARAM_TRAINABLE].n;
    ot_named *gn = ot_calloc(c->n_groups ? c->n_groups : 1, sizeof *gn);
    if (!gn) return OT_NOMEM();
    otter_status s = OTTER_OK;
    for (size_t g = 0; g < c->n_groups && s == OTTER_OK; g++) {
        if (ot_str_empty(c->groups[g].name)) s = ot_error(OTTER_ERR_INVALID, "optimizer group %zu has no name", g);
        gn[g].name = c->groups[g].name;
    }
    if (s == OTTER_OK) s = sort_unique(gn, c->n_groups, "optimizer group", "");
    ot_free(gn);
    for (size_t g = 0; g < c->n_groups && s == OTTER_OK; g++) {
        const otter_optimizer_group *gr = &c->groups[g];
        ot_named *sn = ot_calloc(gr->n_states ? gr->n_states : 1, sizeof *sn);
        if (!sn) return OT_NOMEM();
        for (size_t j = 0; j < gr->n_states && s == OTTER_OK; j++) {
            const otter_param_optimizer_state *st = &gr->states[j];
            if (ot_str_empty(st->param_name)) {
                s = ot_error(OTTER_ERR_INVALID, "optimizer group '%s': state %zu has no parameter name", gr->name, j);
                break;
            }
            sn[j].name = st->param_name;
            const ot_named *p = lookup(params, n_params, st->param_name);
            if (!p || (const void *)p->item == NULL) {
                s = ot_error(OTTER_ERR_INVALID,
                             "optimizer group '%s': state for '%s', which is not a trainable parameter of the "
                             "checkpoint",
                             gr->name, st->param_name);
                break;
            }
            const otter_tensor *param = p->item;
            ot_named *mn = ot_calloc(st->n_momentums ? st->n_momentums : 1, sizeof *mn);
            if (!mn) {
                s = OT_NOMEM();
                break;
            }
            for (size_t m = 0; m < st->n_momentums && s == OTTER_OK; m++) {
                const otter_tensor *mt = st->momentums[m];
                s = check_tensor(mt, "momentum", c->nominal);
                if (s != OTTER_OK) {
                    ot_error_context(s, "optimizer group '%s', parameter '%s': ", gr->name, st->param_name);
                    break;
                }
                mn[m].name = mt->name;
                char a[160], b[160];
                if (!same_shape(mt, param))
                    s = ot_error(OTTER_ERR_INVALID,
                                 "optimizer group '%s': momentum '%s' of '%s' is %s %s, the parameter is %s %s",
                                 gr->name, mt->name, st->param_name, otter_dtype_name(mt->dtype),
                                 ot_ckpt_shape_str(mt, a, sizeof a), otter_dtype_name(param->dtype),
                                 ot_ckpt_shape_str(param, b, sizeof b));
            }
            if (s == OTTER_OK) {
                char where[300];
                snprintf(where, sizeof where, "optimizer group '%s', parameter '%s'", gr->name, st->param_name);
                s = sort_unique(mn, st->n_momentums, "momentum", where);
            }
            ot_free(mn);
        }
        if (s == OTTER_OK) {
            char where[300];
            snprintf(where, sizeof where, "optimizer group '%s'", gr->name);
            s = sort_unique(sn, gr->n_states, "state for parameter", where);
        }
        /* Every trainable parameter has a state (states are unique and all trainable, so counting suffices;
         * name the first one missing). */
        if (s == OTTER_OK && gr->n_states != n_trainable) {
            for (size_t i = 0; i < n_trainable; i++) {
                const char *pn = c->params[OTTER_PARAM_TRAINABLE].v[i]->name;
                if (!lookup(sn, gr->n_states, pn)) {
                    s = ot_error(OTTER_ERR_INVALID,
                                 "optimizer group '%s' has no state for trainable parameter '%s' (ORT needs one "
                                 "for every trainable parameter)",
                                 gr->name, pn);
                    break;
                }
            }
        }
        ot_free(sn);
    }
    return s;
}

/* The rules of the spec that a whole state must meet. */
otter_status ot_ckpt_validate(const otter_checkpoint *c, bool with_groups) {
    size_t n_params = c->params[0].n + c->params[1].n;
    ot_named *pn = ot_calloc(n_params ? n_params : 1, sizeof *pn);
    if (!pn) return OT_NOMEM();
    otter_status s = OTTER_OK;
    size_t k = 0;
    for (int kind = 0; kind < 2 && s == OTTER_OK; kind++)
        for (size_t i = 0; i < c->params[kind].n && s == OTTER_OK; i++) {
            const otter_tensor *t = c->params[kind].v[i];
            s = check_tensor(t, kind == 0 ? "trainable parameter" : "frozen parameter", c->nominal);
            pn[k].name = t->name;
            pn[k++].item = kind == 0 ? t : NULL; /* item: the tensor for trainable ones */
        }
    if (s == OTTER_OK) s = sort_unique(pn, n_params, "parameter", "");
    if (s == OTTER_OK && with_groups) s = validate_groups(c, pn, n_params);
    ot_free(pn);
    if (s != OTTER_OK) return s;
    ot_named *qn = ot_calloc(c->n_props ? c->n_props : 1, sizeof *qn);
    if (!qn) return OT_NOMEM();
    for (size_t i = 0; i < c->n_props && s == OTTER_OK; i++) {
        const otter_property *p = &c->props[i];
        if (ot_str_empty(p->name))
            s = ot_error(OTTER_ERR_INVALID, "property %zu has no name", i);
        else if (p->type == OTTER_PROPERTY_STRING && !p->s)
            s = ot_error(OTTER_ERR_INVALID, "string property '%s' has no value", p->name);
        else if (p->type != OTTER_PROPERTY_INT && p->type != OTTER_PROPERTY_FLOAT && p->type != OTTER_PROPERTY_STRING)
            s = ot_error(OTTER_ERR_INVALID, "property '%s' has an invalid type %d", p->name, (int)p->type);
        qn[i].name = p->name;
    }
    if (s == OTTER_OK) s = sort_unique(qn, c->n_props, "property", "");
    ot_free(qn);
    return s;
}
