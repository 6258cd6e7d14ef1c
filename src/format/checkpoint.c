/* ONNX Runtime's training checkpoint: a flatbuffer with file identifier "ODTC" (see
 * specs/ort-training-format.md, "Checkpoint"). No flatbuffers library: the reader below checks every offset,
 * length and alignment against the buffer before it touches a byte, and the writer lays the buffer out front
 * to back (each object after the one that refers to it, so every uoffset is positive; vtables just before
 * their tables).
 *
 * Structural problems are reported by the parser with the byte offset; the semantic rules (unique names,
 * an optimizer state for every trainable parameter, momentums shaped like their parameter, ...) are checked by
 * validate(), which both the reader (after parsing) and the writer (before writing) run, so whatever loads
 * can be saved again. */
#include <stdarg.h>
#include <string.h>

#include "core/core.h"
#include "otter/checkpoint.h"

/* Schema slots (field index in declaration order). */
enum { CK_VERSION = 0, CK_MODULE_STATE = 1, CK_OPTIMIZER_GROUPS = 2, CK_PROPERTY_BAG = 3 };
enum { MS_REQUIRES_GRAD = 0, MS_FROZEN = 1, MS_IS_NOMINAL = 2, MS_HAS_EXTERNAL_DATA = 3 };
enum { OG_NAME = 0, OG_STEP = 1, OG_LR = 2, OG_STATES = 3 };
enum { PS_PARAM_NAME = 0, PS_MOMENTUMS = 1 };
enum { PB_INTS = 0, PB_FLOATS = 1, PB_STRINGS = 2 };
enum { PR_NAME = 0, PR_VALUE = 1 };
enum { T_NAME = 0, T_DOC = 1, T_DIMS = 2, T_DATA_TYPE = 3, T_RAW = 4, T_STRINGS = 5, T_EXTERNAL = 6 };

#define FB_MAX_SIZE   ((size_t)0x7fffffff) /* flatbuffers offsets are 32-bit; buffers stay under 2 GiB */
#define DEFAULT_GROUP "group0"

typedef struct tensor_list {
    otter_tensor **v;
    size_t n, cap;
} tensor_list;

struct otter_checkpoint {
    int version;
    bool nominal;
    tensor_list params[2]; /* OTTER_PARAM_TRAINABLE, OTTER_PARAM_FROZEN */
    otter_optimizer_group *groups;
    size_t n_groups, cap_groups;
    otter_property *props;
    size_t n_props, cap_props;
};

/* ==== state: life cycle and helpers ========================================================== */

static void tensor_list_free(tensor_list *l) {
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
static const char *shape_str(const otter_tensor *t, char *buf, size_t cap) {
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

/* A tensor with dtype and dims but no values (data NULL), allocating nothing for the elements. */
static otter_status make_shell(otter_tensor **out, const char *name, otter_dtype dtype, int rank, const int64_t *dims) {
    if (rank < 0 || rank > OTTER_MAX_RANK) return ot_error(OTTER_ERR_UNSUPPORTED, "tensor rank %d", rank);
    OT_TRY(otter_tensor_create(out, name, dtype, 0, NULL)); /* a scalar: one element */
    drop_data(*out);
    (*out)->rank = rank;
    for (int i = 0; i < rank; i++) (*out)->dims[i] = dims[i];
    return OTTER_OK;
}

/* Copy of src (name replaced by name when given); without values when nominal. */
static otter_status copy_tensor(otter_tensor **out, const otter_tensor *src, const char *name, bool nominal) {
    if (nominal || !src->data) return make_shell(out, name ? name : src->name, src->dtype, src->rank, src->dims);
    return otter_tensor_from_data(out, name ? name : src->name, src->dtype, src->rank, src->dims, src->data);
}

static bool has_values(const otter_tensor *t) { return t->data != NULL || otter_tensor_numel(t) == 0; }

static otter_status list_push(tensor_list *l, otter_tensor *t) {
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
    otter_status s = list_push(&c->params[kind], copy);
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
                        otter_dtype_name(p->dtype), shape_str(p, a, sizeof a), otter_dtype_name(t->dtype),
                        shape_str(t, b, sizeof b));
    if (!has_values(t)) return ot_error(OTTER_ERR_ARGUMENT, "new value of parameter '%s' has no data", name);
    otter_tensor *copy = NULL;
    OT_TRY(copy_tensor(&copy, t, name, false));
    otter_tensor_free(p);
    c->params[k].v[i] = copy;
    return OTTER_OK;
}

otter_status otter_checkpoint_remove_param(otter_checkpoint *c, const char *name) {
    if (!c || !name) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_remove_param: NULL argument");
    int k;
    size_t i;
    otter_tensor *p = find_param(c, name, &k, &i);
    if (!p) return ot_error(OTTER_ERR_NOT_FOUND, "checkpoint has no parameter '%s'", name);
    otter_tensor_free(p);
    tensor_list *l = &c->params[k];
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

otter_status otter_checkpoint_add_optimizer_state(otter_checkpoint *c, const char *group, const char *param,
                                                  const otter_tensor *m) {
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
                        otter_dtype_name(m->dtype), shape_str(m, a, sizeof a), otter_dtype_name(p->dtype),
                        shape_str(p, b, sizeof b));
    if (!c->nominal && !has_values(m))
        return ot_error(OTTER_ERR_ARGUMENT, "momentum '%s' of '%s' has no data", m->name, param);
    otter_tensor *copy = NULL;
    OT_TRY(copy_tensor(&copy, m, NULL, c->nominal));
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

typedef struct named {
    const char *name;
    const void *item;
} named;

static int cmp_named(const void *a, const void *b) {
    const named *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Sort names; OTTER_ERR_INVALID naming the first duplicate (what: "parameter"). */
static otter_status sort_unique(named *v, size_t n, const char *what, const char *where) {
    if (n > 1) qsort(v, n, sizeof *v, cmp_named);
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0)
            return ot_error(OTTER_ERR_INVALID, "%s%s%s '%s' appears twice", where, where[0] ? ": " : "", what,
                            v[i].name);
    return OTTER_OK;
}

static const named *lookup(const named *v, size_t n, const char *name) {
    named key = {name, NULL};
    return n ? bsearch(&key, v, n, sizeof *v, cmp_named) : NULL;
}

static otter_status check_tensor(const otter_tensor *t, const char *what, bool nominal) {
    if (ot_str_empty(t->name)) return ot_error(OTTER_ERR_INVALID, "%s has no name", what);
    if ((int)t->dtype <= 0 || t->dtype >= OTTER_DTYPE_COUNT_)
        return ot_error(OTTER_ERR_INVALID, "%s '%s': invalid element type %d", what, t->name, (int)t->dtype);
    if (!nominal && !has_values(t))
        return ot_error(OTTER_ERR_INVALID, "%s '%s' has no data and the checkpoint is not nominal", what, t->name);
    return OTTER_OK;
}

static otter_status validate_groups(const otter_checkpoint *c, const named *params, size_t n_params) {
    size_t n_trainable = c->params[OTTER_PARAM_TRAINABLE].n;
    named *gn = ot_calloc(c->n_groups ? c->n_groups : 1, sizeof *gn);
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
        named *sn = ot_calloc(gr->n_states ? gr->n_states : 1, sizeof *sn);
        if (!sn) return OT_NOMEM();
        for (size_t j = 0; j < gr->n_states && s == OTTER_OK; j++) {
            const otter_param_optimizer_state *st = &gr->states[j];
            if (ot_str_empty(st->param_name)) {
                s = ot_error(OTTER_ERR_INVALID, "optimizer group '%s': state %zu has no parameter name", gr->name, j);
                break;
            }
            sn[j].name = st->param_name;
            const named *p = lookup(params, n_params, st->param_name);
            if (!p || (const void *)p->item == NULL) {
                s = ot_error(OTTER_ERR_INVALID,
                             "optimizer group '%s': state for '%s', which is not a trainable parameter of the "
                             "checkpoint",
                             gr->name, st->param_name);
                break;
            }
            const otter_tensor *param = p->item;
            named *mn = ot_calloc(st->n_momentums ? st->n_momentums : 1, sizeof *mn);
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
                                 shape_str(mt, a, sizeof a), otter_dtype_name(param->dtype),
                                 shape_str(param, b, sizeof b));
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
static otter_status validate(const otter_checkpoint *c, bool with_groups) {
    size_t n_params = c->params[0].n + c->params[1].n;
    named *pn = ot_calloc(n_params ? n_params : 1, sizeof *pn);
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
    named *qn = ot_calloc(c->n_props ? c->n_props : 1, sizeof *qn);
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

/* ==== reader ================================================================================= */

typedef struct rd {
    const uint8_t *b;
    size_t n;
    size_t data_bytes; /* tensor bytes copied so far: at most n, else tables are shared (see read_tensor) */
} rd;

typedef struct tab {
    size_t pos, vt;
    uint16_t vtsize, tsize;
    const char *what; /* "tensor module_state.requires_grad_params[3]" */
} tab;

static uint16_t rd_u16(const rd *r, size_t p) { return (uint16_t)(r->b[p] | r->b[p + 1] << 8); }
static uint32_t rd_u32(const rd *r, size_t p) {
    return (uint32_t)r->b[p] | (uint32_t)r->b[p + 1] << 8 | (uint32_t)r->b[p + 2] << 16 | (uint32_t)r->b[p + 3] << 24;
}
static uint64_t rd_u64(const rd *r, size_t p) { return (uint64_t)rd_u32(r, p) | (uint64_t)rd_u32(r, p + 4) << 32; }

static otter_status bad(size_t at, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static otter_status bad(size_t at, const char *what, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ot_error(OTTER_ERR_INVALID, "%s at byte %zu: %s", what, at, msg);
}

/* The table at pos, with its vtable checked. */
static otter_status open_table(const rd *r, size_t pos, const char *what, tab *t) {
    if (pos % 4) return bad(pos, what, "table is not 4-byte aligned");
    if (pos > r->n || r->n - pos < 4) return bad(pos, what, "table starts past the end of the %zu-byte buffer", r->n);
    int64_t vt = (int64_t)pos - (int64_t)(int32_t)rd_u32(r, pos);
    if (vt < 0 || (uint64_t)vt > r->n || r->n - (size_t)vt < 4)
        return bad(pos, what, "vtable offset %d points to byte %lld, outside the %zu-byte buffer",
                   (int)(int32_t)rd_u32(r, pos), (long long)vt, r->n);
    if (vt % 2) return bad(pos, what, "vtable at byte %lld is not 2-byte aligned", (long long)vt);
    t->pos = pos;
    t->vt = (size_t)vt;
    t->vtsize = rd_u16(r, t->vt);
    t->tsize = rd_u16(r, t->vt + 2);
    t->what = what;
    if (t->vtsize < 4 || t->vtsize % 2 || r->n - t->vt < t->vtsize)
        return bad(pos, what, "vtable at byte %zu has a bad size %u", t->vt, t->vtsize);
    if (t->tsize < 4 || r->n - pos < t->tsize)
        return bad(pos, what, "table size %u runs past the end of the %zu-byte buffer", t->tsize, r->n);
    return OTTER_OK;
}

/* Position of field slot (of size bytes), or 0 when absent. */
static otter_status field(const rd *r, const tab *t, int slot, size_t size, size_t *pos) {
    *pos = 0;
    size_t e = 4 + 2 * (size_t)slot;
    if (e + 2 > t->vtsize) return OTTER_OK;
    uint16_t off = rd_u16(r, t->vt + e);
    if (!off) return OTTER_OK;
    if (off < 4 || (size_t)off + size > t->tsize)
        return bad(t->pos, t->what, "field %d at offset %u lies outside the %u-byte table", slot, off, t->tsize);
    if ((t->pos + off) % size) return bad(t->pos + off, t->what, "field %d is not %zu-byte aligned", slot, size);
    *pos = t->pos + off;
    return OTTER_OK;
}

static otter_status get_scalar(const rd *r, const tab *t, int slot, size_t size, uint64_t def, uint64_t *out) {
    size_t p;
    OT_TRY(field(r, t, slot, size, &p));
    if (!p)
        *out = def;
    else if (size == 1)
        *out = r->b[p];
    else if (size == 4)
        *out = rd_u32(r, p);
    else
        *out = rd_u64(r, p);
    return OTTER_OK;
}

/* Target of an offset field; 0 when absent. */
static otter_status get_ref(const rd *r, const tab *t, int slot, size_t *target) {
    size_t p;
    *target = 0;
    OT_TRY(field(r, t, slot, 4, &p));
    if (!p) return OTTER_OK;
    uint64_t to = (uint64_t)p + rd_u32(r, p);
    if (to >= r->n)
        return bad(p, t->what, "field %d points to byte %llu, past the end of the %zu-byte buffer", slot,
                   (unsigned long long)to, r->n);
    *target = (size_t)to;
    return OTTER_OK;
}

/* A vector at pos of count elements of elem bytes (aligned to align) starting at *elems. */
static otter_status open_vector(const rd *r, size_t pos, size_t elem, size_t align, const char *what, size_t *count,
                                size_t *elems) {
    if (pos % 4) return bad(pos, what, "vector is not 4-byte aligned");
    if (r->n - pos < 4) return bad(pos, what, "vector length runs past the end of the %zu-byte buffer", r->n);
    uint32_t len = rd_u32(r, pos);
    size_t start = pos + 4;
    if (align > 1 && start % align) return bad(pos, what, "vector elements are not %zu-byte aligned", align);
    if ((uint64_t)len * elem > (uint64_t)(r->n - start))
        return bad(pos, what, "vector of %u elements of %zu bytes runs past the end of the %zu-byte buffer", len, elem,
                   r->n);
    *count = len;
    *elems = start;
    return OTTER_OK;
}

static otter_status get_vector(const rd *r, const tab *t, int slot, size_t elem, size_t align, const char *what,
                               bool *present, size_t *count, size_t *elems) {
    size_t to;
    OT_TRY(get_ref(r, t, slot, &to));
    *present = to != 0;
    *count = *elems = 0;
    if (!to) return OTTER_OK;
    return open_vector(r, to, elem, align, what, count, elems);
}

/* A string at pos: its bytes (not copied) and length; NUL-terminated in the buffer. */
static otter_status open_string(const rd *r, size_t pos, const char *what, const char **s, size_t *len) {
    size_t n = 0, e = 0;
    OT_TRY(open_vector(r, pos, 1, 1, what, &n, &e));
    if (e + n >= r->n || r->b[e + n] != 0) return bad(pos, what, "string of %zu bytes is not NUL-terminated", n);
    *s = (const char *)r->b + e;
    *len = n;
    return OTTER_OK;
}

/* A string field used as a C name: present when required, no NUL inside. *out NULL when absent. */
static otter_status get_name(const rd *r, const tab *t, int slot, bool required, const char *field_name,
                             const char **out) {
    size_t to, len;
    *out = NULL;
    OT_TRY(get_ref(r, t, slot, &to));
    if (!to) {
        if (required) return bad(t->pos, t->what, "has no %s", field_name);
        return OTTER_OK;
    }
    char what[300];
    snprintf(what, sizeof what, "%s.%s", t->what, field_name);
    OT_TRY(open_string(r, to, what, out, &len));
    if (memchr(*out, 0, len)) return bad(to, what, "contains a NUL byte");
    return OTTER_OK;
}

/* The i-th table of a vector of offsets. */
static otter_status vector_table(const rd *r, size_t elems, size_t i, const char *what, tab *t) {
    size_t p = elems + 4 * i;
    uint64_t to = (uint64_t)p + rd_u32(r, p);
    if (to >= r->n)
        return bad(p, what, "offset points to byte %llu, past the end of the %zu-byte buffer", (unsigned long long)to,
                   r->n);
    return open_table(r, (size_t)to, what, t);
}

static otter_status charge(rd *r, size_t bytes, const tab *t) {
    if (bytes > r->n - r->data_bytes)
        return bad(t->pos, t->what,
                   "tensor data adds up to more than the %zu bytes of the buffer (tables shared between tensors?)",
                   r->n);
    r->data_bytes += bytes;
    return OTTER_OK;
}

/* One Tensor table into a new otter_tensor. */
static otter_status read_tensor(rd *r, size_t pos, const char *what, bool nominal, otter_tensor **out) {
    *out = NULL;
    tab t;
    OT_TRY(open_table(r, pos, what, &t));
    const char *name;
    OT_TRY(get_name(r, &t, T_NAME, true, "name", &name));
    char full[400];
    snprintf(full, sizeof full, "%s '%s'", what, name);
    t.what = full;
    uint64_t v;
    OT_TRY(get_scalar(r, &t, T_EXTERNAL, 8, (uint64_t)-1, &v));
    if ((int64_t)v >= 0)
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "%s at byte %zu: data stored as external data at offset %lld (otter reads inline data only)",
                        full, pos, (long long)(int64_t)v);
    OT_TRY(get_scalar(r, &t, T_DATA_TYPE, 4, 0, &v));
    int32_t dt = (int32_t)(uint32_t)v;
    if (dt >= 17 && dt <= 23)
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s at byte %zu: element type %d (float8/int4) is not supported", full,
                        pos, (int)dt);
    if (dt <= 0 || dt >= OTTER_DTYPE_COUNT_) return bad(pos, full, "invalid element type %d", (int)dt);
    otter_dtype dtype = (otter_dtype)dt;
    bool present;
    size_t rank, dims_at;
    OT_TRY(get_vector(r, &t, T_DIMS, 8, 8, full, &present, &rank, &dims_at));
    if (!present) return bad(pos, full, "has no dims");
    if (rank > OTTER_MAX_RANK)
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s at byte %zu: rank %zu (otter supports up to %d)", full, pos, rank,
                        OTTER_MAX_RANK);
    int64_t dims[OTTER_MAX_RANK];
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t i = 0; i < rank; i++) {
        dims[i] = (int64_t)rd_u64(r, dims_at + 8 * i);
        if (dims[i] < 0) return bad(dims_at + 8 * i, full, "negative dimension %lld", (long long)dims[i]);
        if (dims[i] && numel > (UINT64_C(1) << 46) / (uint64_t)dims[i]) overflow = true;
        numel *= (uint64_t)dims[i];
    }
    if (overflow) return bad(dims_at, full, "dimensions overflow");
    size_t raw_n, raw_at, str_n, str_at;
    bool raw_present, str_present;
    OT_TRY(get_vector(r, &t, T_RAW, 1, 1, full, &raw_present, &raw_n, &raw_at));
    OT_TRY(get_vector(r, &t, T_STRINGS, 4, 4, full, &str_present, &str_n, &str_at));
    uint64_t want = dtype == OTTER_DTYPE_STRING ? 0 : numel * otter_dtype_size(dtype);
    if (dtype != OTTER_DTYPE_STRING) {
        if (!raw_present) return bad(pos, full, "has no raw_data (and no external data offset)");
        if (nominal && raw_n != 0)
            return bad(raw_at - 4, full, "the state is nominal but raw_data holds %zu bytes", raw_n);
        if (!nominal && raw_n != want) {
            char sh[160];
            otter_tensor tmp = {.dtype = dtype, .rank = (int)rank};
            memcpy(tmp.dims, dims, rank * sizeof *dims);
            return bad(raw_at - 4, full, "raw_data holds %zu bytes, %s %s needs %llu", raw_n, otter_dtype_name(dtype),
                       shape_str(&tmp, sh, sizeof sh), (unsigned long long)want);
        }
    } else if (nominal ? str_n != 0 : str_n != numel) {
        return bad(pos, full, "string_data holds %zu strings, %s needs %llu", str_n,
                   nominal ? "a nominal state" : "dims", nominal ? 0ULL : (unsigned long long)numel);
    }
    otter_tensor *ten = NULL;
    if (nominal || numel == 0) {
        OT_TRY(make_shell(&ten, name, dtype, (int)rank, dims));
    } else if (dtype != OTTER_DTYPE_STRING) {
        OT_TRY(charge(r, raw_n, &t));
        OT_TRY(otter_tensor_from_data(&ten, name, dtype, (int)rank, dims, r->b + raw_at));
    } else {
        OT_TRY(charge(r, 4 * str_n, &t));
        OT_TRY(otter_tensor_create(&ten, name, dtype, (int)rank, dims));
        otter_bytes *sv = ten->data;
        for (size_t i = 0; i < str_n; i++) {
            size_t p = str_at + 4 * i;
            uint64_t to = (uint64_t)p + rd_u32(r, p);
            const char *s;
            size_t len;
            otter_status st = to >= r->n ? bad(p, full, "string_data[%zu] points past the end of the buffer", i)
                                         : open_string(r, (size_t)to, full, &s, &len);
            if (st == OTTER_OK) st = charge(r, len, &t);
            if (st == OTTER_OK && !(sv[i].data = ot_strndup(s, len))) st = OT_NOMEM();
            if (st != OTTER_OK) {
                otter_tensor_free(ten);
                return st;
            }
            sv[i].len = len;
        }
    }
    *out = ten;
    return OTTER_OK;
}

static otter_status read_tensor_vector(rd *r, const tab *parent, int slot, const char *what, bool required,
                                       bool nominal, tensor_list *out) {
    bool present;
    size_t n, at;
    OT_TRY(get_vector(r, parent, slot, 4, 4, what, &present, &n, &at));
    if (!present && required)
        return bad(parent->pos, parent->what, "has no %s vector (ORT needs it, even when empty)", what);
    for (size_t i = 0; i < n; i++) {
        char w[300];
        snprintf(w, sizeof w, "tensor %s[%zu]", what, i);
        size_t p = at + 4 * i;
        uint64_t to = (uint64_t)p + rd_u32(r, p);
        if (to >= r->n) return bad(p, w, "offset points past the end of the %zu-byte buffer", r->n);
        otter_tensor *ten;
        OT_TRY(read_tensor(r, (size_t)to, w, nominal, &ten));
        otter_status s = list_push(out, ten);
        if (s != OTTER_OK) {
            otter_tensor_free(ten);
            return s;
        }
    }
    return OTTER_OK;
}

static otter_status read_module_state(rd *r, size_t pos, otter_checkpoint *c) {
    tab t;
    OT_TRY(open_table(r, pos, "module_state", &t));
    uint64_t v;
    OT_TRY(get_scalar(r, &t, MS_IS_NOMINAL, 1, 0, &v));
    c->nominal = v != 0;
    OT_TRY(get_scalar(r, &t, MS_HAS_EXTERNAL_DATA, 1, 0, &v));
    if (v)
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "module_state at byte %zu: parameters are stored in an external data "
                        "file (otter reads inline data only)",
                        pos);
    OT_TRY(read_tensor_vector(r, &t, MS_REQUIRES_GRAD, "module_state.requires_grad_params", true, c->nominal,
                              &c->params[OTTER_PARAM_TRAINABLE]));
    return read_tensor_vector(r, &t, MS_FROZEN, "module_state.frozen_params", true, c->nominal,
                              &c->params[OTTER_PARAM_FROZEN]);
}

static otter_status read_groups(rd *r, const tab *root, otter_checkpoint *c) {
    bool present;
    size_t n, at;
    OT_TRY(get_vector(r, root, CK_OPTIMIZER_GROUPS, 4, 4, "optimizer_groups", &present, &n, &at));
    if (!n) return OTTER_OK;
    if (!(c->groups = ot_calloc(n, sizeof *c->groups))) return OT_NOMEM();
    c->cap_groups = n;
    for (size_t g = 0; g < n; g++) {
        char w[300];
        snprintf(w, sizeof w, "optimizer_groups[%zu]", g);
        tab t;
        OT_TRY(vector_table(r, at, g, w, &t));
        otter_optimizer_group *gr = &c->groups[c->n_groups++];
        const char *name;
        OT_TRY(get_name(r, &t, OG_NAME, true, "group_name", &name));
        if (!(gr->name = ot_strdup(name))) return OT_NOMEM();
        uint64_t v;
        OT_TRY(get_scalar(r, &t, OG_STEP, 8, 0, &v));
        gr->step = (int64_t)v;
        OT_TRY(get_scalar(r, &t, OG_LR, 4, 0, &v));
        uint32_t bits = (uint32_t)v;
        memcpy(&gr->initial_learning_rate, &bits, 4);
        size_t ns, sat;
        OT_TRY(get_vector(r, &t, OG_STATES, 4, 4, w, &present, &ns, &sat));
        if (!ns) continue;
        if (!(gr->states = ot_calloc(ns, sizeof *gr->states))) return OT_NOMEM();
        for (size_t j = 0; j < ns; j++) {
            char ws[340];
            snprintf(ws, sizeof ws, "optimizer_groups[%zu].optimizer_states[%zu]", g, j);
            tab st;
            OT_TRY(vector_table(r, sat, j, ws, &st));
            otter_param_optimizer_state *ps = &gr->states[gr->n_states++];
            OT_TRY(get_name(r, &st, PS_PARAM_NAME, true, "param_name", &name));
            if (!(ps->param_name = ot_strdup(name))) return OT_NOMEM();
            size_t nm, mat;
            OT_TRY(get_vector(r, &st, PS_MOMENTUMS, 4, 4, ws, &present, &nm, &mat));
            if (!nm) continue;
            if (!(ps->momentums = ot_calloc(nm, sizeof *ps->momentums))) return OT_NOMEM();
            for (size_t m = 0; m < nm; m++) {
                char wm[400];
                snprintf(wm, sizeof wm, "tensor %s.momentums[%zu]", ws, m);
                size_t p = mat + 4 * m;
                uint64_t to = (uint64_t)p + rd_u32(r, p);
                if (to >= r->n) return bad(p, wm, "offset points past the end of the %zu-byte buffer", r->n);
                OT_TRY(read_tensor(r, (size_t)to, wm, c->nominal, &ps->momentums[m]));
                ps->n_momentums++;
            }
        }
    }
    return OTTER_OK;
}

static otter_status read_properties(rd *r, const tab *root, otter_checkpoint *c) {
    size_t to;
    OT_TRY(get_ref(r, root, CK_PROPERTY_BAG, &to));
    if (!to) return OTTER_OK;
    tab bag;
    OT_TRY(open_table(r, to, "property_bag", &bag));
    static const char *const kinds[3] = {"ints", "floats", "strings"};
    for (int k = 0; k < 3; k++) {
        bool present;
        size_t n, at;
        char w[64];
        snprintf(w, sizeof w, "property_bag.%s", kinds[k]);
        OT_TRY(get_vector(r, &bag, k, 4, 4, w, &present, &n, &at));
        if (n) OT_TRY(ot_grow((void **)&c->props, &c->cap_props, c->n_props + n, sizeof *c->props));
        for (size_t i = 0; i < n; i++) {
            char wi[100];
            snprintf(wi, sizeof wi, "property_bag.%s[%zu]", kinds[k], i);
            tab t;
            OT_TRY(vector_table(r, at, i, wi, &t));
            otter_property *p = &c->props[c->n_props];
            memset(p, 0, sizeof *p);
            const char *name;
            OT_TRY(get_name(r, &t, PR_NAME, true, "name", &name));
            if (!(p->name = ot_strdup(name))) return OT_NOMEM();
            c->n_props++;
            p->type = (otter_property_type)k;
            uint64_t v;
            if (k == PB_INTS) {
                OT_TRY(get_scalar(r, &t, PR_VALUE, 8, 0, &v));
                p->i = (int64_t)v;
            } else if (k == PB_FLOATS) {
                OT_TRY(get_scalar(r, &t, PR_VALUE, 4, 0, &v));
                uint32_t bits = (uint32_t)v;
                memcpy(&p->f, &bits, 4);
            } else {
                const char *s;
                OT_TRY(get_name(r, &t, PR_VALUE, true, "value", &s));
                if (!(p->s = ot_strdup(s))) return OT_NOMEM();
            }
        }
    }
    return OTTER_OK;
}

static otter_status parse(rd *r, otter_checkpoint *c) {
    if (r->n < 8) return ot_error(OTTER_ERR_INVALID, "%zu bytes are too short for a checkpoint (at least 8)", r->n);
    if (memcmp(r->b + 4, "ODTC", 4) != 0)
        return ot_error(OTTER_ERR_INVALID,
                        "bytes 4..8 are \"%c%c%c%c\" (hex %02x%02x%02x%02x), not the checkpoint file identifier "
                        "\"ODTC\"",
                        r->b[4] >= 32 && r->b[4] < 127 ? r->b[4] : '.', r->b[5] >= 32 && r->b[5] < 127 ? r->b[5] : '.',
                        r->b[6] >= 32 && r->b[6] < 127 ? r->b[6] : '.', r->b[7] >= 32 && r->b[7] < 127 ? r->b[7] : '.',
                        r->b[4], r->b[5], r->b[6], r->b[7]);
    uint32_t root = rd_u32(r, 0);
    if (root >= r->n)
        return bad(0, "root offset", "points to byte %u, past the end of the %zu-byte buffer", root, r->n);
    tab t;
    OT_TRY(open_table(r, root, "checkpoint (root table)", &t));
    uint64_t v;
    OT_TRY(get_scalar(r, &t, CK_VERSION, 4, 0, &v));
    int32_t version = (int32_t)(uint32_t)v;
    if (version != 1 && version != 2)
        return ot_error(OTTER_ERR_UNSUPPORTED, "checkpoint version %d (otter reads versions 1 and 2)", (int)version);
    c->version = version;
    size_t ms;
    OT_TRY(get_ref(r, &t, CK_MODULE_STATE, &ms));
    if (ms) OT_TRY(read_module_state(r, ms, c));
    OT_TRY(read_groups(r, &t, c));
    OT_TRY(read_properties(r, &t, c));
    return validate(c, true);
}

otter_status otter_checkpoint_load_from_memory(otter_checkpoint **out, const void *data, size_t size) {
    if (!out || (!data && size))
        return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_load_from_memory: NULL argument");
    *out = NULL;
    if (size > FB_MAX_SIZE)
        return ot_error(OTTER_ERR_INVALID, "%zu bytes exceed the 2 GiB a flatbuffer can address", size);
    otter_checkpoint *c;
    OT_TRY(otter_checkpoint_create(&c));
    rd r = {data, size, 0};
    otter_status s = parse(&r, c);
    if (s != OTTER_OK) {
        otter_checkpoint_free(c);
        return s;
    }
    *out = c;
    return OTTER_OK;
}

otter_status otter_checkpoint_load(otter_checkpoint **out, const char *path) {
    if (!out || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_load: NULL argument");
    *out = NULL;
    void *data;
    size_t size;
    OT_TRY(ot_read_file(path, &data, &size));
    otter_status s = otter_checkpoint_load_from_memory(out, data, size);
    ot_free(data);
    if (s != OTTER_OK) ot_error_context(s, "checkpoint '%s': ", path);
    return s;
}

/* ==== writer ================================================================================= */

typedef struct fbw {
    uint8_t *b;
    size_t n, cap;
} fbw;

static otter_status w_need(fbw *w, size_t more) {
    if (more > FB_MAX_SIZE - w->n)
        return ot_error(OTTER_ERR_UNSUPPORTED, "the checkpoint would exceed the 2 GiB a flatbuffer can address");
    if (w->n + more <= w->cap) return OTTER_OK;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->n + more) cap *= 2;
    uint8_t *b = ot_realloc(w->b, cap);
    if (!b) return OT_NOMEM();
    w->b = b;
    w->cap = cap;
    return OTTER_OK;
}

static otter_status w_bytes(fbw *w, const void *p, size_t n) {
    OT_TRY(w_need(w, n));
    if (n) memcpy(w->b + w->n, p, n);
    w->n += n;
    return OTTER_OK;
}

/* Zero padding until (n + shift) is a multiple of a. */
static otter_status w_pad(fbw *w, size_t a, size_t shift) {
    size_t k = (a - (w->n + shift) % a) % a;
    OT_TRY(w_need(w, k));
    memset(w->b + w->n, 0, k);
    w->n += k;
    return OTTER_OK;
}

static void put_u16(fbw *w, size_t p, uint16_t v) {
    w->b[p] = (uint8_t)v;
    w->b[p + 1] = (uint8_t)(v >> 8);
}
static void put_u32(fbw *w, size_t p, uint32_t v) {
    for (int i = 0; i < 4; i++) w->b[p + (size_t)i] = (uint8_t)(v >> (8 * i));
}
static otter_status w_u32(fbw *w, uint32_t v) {
    OT_TRY(w_need(w, 4));
    put_u32(w, w->n, v);
    w->n += 4;
    return OTTER_OK;
}

/* Point the uoffset at slot to target (written later, so target > slot). */
static void w_link(fbw *w, size_t slot, size_t target) { put_u32(w, slot, (uint32_t)(target - slot)); }

/* A table field: slot, size 1/4/8, value (for offsets: size 4, ref true, value ignored). */
typedef struct wfield {
    int slot;
    size_t size;
    uint64_t value;
    bool ref;
} wfield;

/* vtable, then the table with fields in the given order (give 8-byte fields first); pos[i] receives each
 * field's position (to link offsets later). The uoffset at link_from is pointed at the table. */
static otter_status w_table(fbw *w, const wfield *f, int nf, size_t link_from, size_t *pos) {
    int nslots = 0;
    size_t align = 4;
    for (int i = 0; i < nf; i++) {
        if (f[i].slot + 1 > nslots) nslots = f[i].slot + 1;
        if (f[i].size > align) align = f[i].size;
    }
    OT_TRY(w_pad(w, 4, 0));
    size_t vt = w->n, vtsize = 4 + 2 * (size_t)nslots;
    OT_TRY(w_need(w, vtsize));
    memset(w->b + vt, 0, vtsize);
    put_u16(w, vt, (uint16_t)vtsize);
    w->n += vtsize;
    /* The table starts 4 bytes before its first field; align so the first (largest) field is aligned. */
    OT_TRY(w_pad(w, align, 4));
    size_t t = w->n;
    w_link(w, link_from, t);
    OT_TRY(w_u32(w, (uint32_t)(int32_t)(t - vt))); /* soffset: vtable = table - soffset */
    for (int i = 0; i < nf; i++) {
        OT_TRY(w_pad(w, f[i].size, 0));
        size_t p = w->n;
        OT_TRY(w_need(w, f[i].size));
        for (size_t k = 0; k < f[i].size; k++) w->b[p + k] = f[i].ref ? 0 : (uint8_t)(f[i].value >> (8 * k));
        w->n += f[i].size;
        put_u16(w, vt + 4 + 2 * (size_t)f[i].slot, (uint16_t)(p - t));
        if (pos) pos[i] = p;
    }
    if (w->n - t > 0xffff) return ot_error(OTTER_ERR_UNSUPPORTED, "flatbuffer table too large");
    put_u16(w, vt + 2, (uint16_t)(w->n - t));
    return OTTER_OK;
}

static otter_status w_string(fbw *w, const char *s, size_t len, size_t link_from) {
    OT_TRY(w_pad(w, 4, 0));
    w_link(w, link_from, w->n);
    OT_TRY(w_u32(w, (uint32_t)len));
    OT_TRY(w_bytes(w, s, len));
    OT_TRY(w_bytes(w, "", 1));
    return OTTER_OK;
}

/* A vector of n offsets (zeros, linked later); *elems receives the first slot. */
static otter_status w_ref_vector(fbw *w, size_t n, size_t link_from, size_t *elems) {
    if (n > UINT32_MAX) return ot_error(OTTER_ERR_UNSUPPORTED, "vector of %zu elements is too long", n);
    OT_TRY(w_pad(w, 4, 0));
    w_link(w, link_from, w->n);
    OT_TRY(w_u32(w, (uint32_t)n));
    OT_TRY(w_need(w, 4 * n));
    memset(w->b + w->n, 0, 4 * n);
    *elems = w->n;
    w->n += 4 * n;
    return OTTER_OK;
}

/* A vector of n scalars of elem bytes whose elements start aligned to align. */
static otter_status w_data_vector(fbw *w, const void *data, size_t n, size_t elem, size_t align, size_t link_from) {
    if (n > UINT32_MAX) return ot_error(OTTER_ERR_UNSUPPORTED, "vector of %zu elements is too long", n);
    OT_TRY(w_pad(w, align, 4));
    w_link(w, link_from, w->n);
    OT_TRY(w_u32(w, (uint32_t)n));
    return w_bytes(w, data, n * elem);
}

/* Items in write order: as held (keep_order) or sorted by name (names are unique: validate()). */
static named *write_order(const void *items, size_t n, size_t stride, size_t name_offset, bool keep_order) {
    named *v = ot_calloc(n ? n : 1, sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *item = (const char *)items + i * stride;
        v[i].item = item;
        memcpy(&v[i].name, item + name_offset, sizeof(char *));
    }
    if (!keep_order && n > 1) qsort(v, n, sizeof *v, cmp_named);
    return v;
}

typedef struct wctx {
    fbw w;
    bool keep_order;
    bool nominal;
} wctx;

static otter_status w_tensor(wctx *x, const otter_tensor *t, size_t link_from) {
    fbw *w = &x->w;
    bool str = t->dtype == OTTER_DTYPE_STRING;
    const wfield f[5] = {{T_NAME, 4, 0, true},
                         {T_DIMS, 4, 0, true},
                         {T_DATA_TYPE, 4, (uint64_t)(uint32_t)t->dtype, false},
                         {T_RAW, 4, 0, true},
                         {T_STRINGS, 4, 0, true}};
    size_t pos[5];
    OT_TRY(w_table(w, f, str ? 5 : 4, link_from, pos));
    OT_TRY(w_string(w, t->name, strlen(t->name), pos[0]));
    OT_TRY(w_data_vector(w, t->dims, (size_t)t->rank, 8, 8, pos[1]));
    bool values = !x->nominal && t->data && otter_tensor_numel(t) > 0;
    if (str || !values)
        OT_TRY(w_data_vector(w, NULL, 0, 1, 8, pos[3]));
    else
        OT_TRY(w_data_vector(w, t->data, otter_tensor_nbytes(t), 1, 8, pos[3]));
    if (str) {
        size_t n = values ? (size_t)otter_tensor_numel(t) : 0, elems;
        OT_TRY(w_ref_vector(w, n, pos[4], &elems));
        const otter_bytes *sv = t->data;
        for (size_t i = 0; i < n; i++) OT_TRY(w_string(w, sv[i].data ? sv[i].data : "", sv[i].len, elems + 4 * i));
    }
    return OTTER_OK;
}

static otter_status w_tensors(wctx *x, otter_tensor *const *v, size_t n, size_t link_from) {
    named *order = ot_calloc(n ? n : 1, sizeof *order);
    if (!order) return OT_NOMEM();
    for (size_t i = 0; i < n; i++) order[i] = (named){v[i]->name, v[i]};
    if (!x->keep_order && n > 1) qsort(order, n, sizeof *order, cmp_named);
    size_t elems;
    otter_status s = w_ref_vector(&x->w, n, link_from, &elems);
    for (size_t i = 0; i < n && s == OTTER_OK; i++) s = w_tensor(x, order[i].item, elems + 4 * i);
    ot_free(order);
    return s;
}

static otter_status w_group(wctx *x, const otter_optimizer_group *g, size_t link_from) {
    fbw *w = &x->w;
    uint32_t lr_bits;
    memcpy(&lr_bits, &g->initial_learning_rate, 4);
    wfield f[4];
    int nf = 0, i_name, i_states;
    if (g->step) f[nf++] = (wfield){OG_STEP, 8, (uint64_t)g->step, false};
    i_name = nf;
    f[nf++] = (wfield){OG_NAME, 4, 0, true};
    if (lr_bits) f[nf++] = (wfield){OG_LR, 4, lr_bits, false};
    i_states = nf;
    f[nf++] = (wfield){OG_STATES, 4, 0, true};
    size_t pos[4];
    OT_TRY(w_table(w, f, nf, link_from, pos));
    OT_TRY(w_string(w, g->name, strlen(g->name), pos[i_name]));
    named *order = write_order(g->states, g->n_states, sizeof *g->states,
                               offsetof(otter_param_optimizer_state, param_name), x->keep_order);
    if (!order) return OT_NOMEM();
    size_t elems;
    otter_status s = w_ref_vector(w, g->n_states, pos[i_states], &elems);
    for (size_t i = 0; i < g->n_states && s == OTTER_OK; i++) {
        const otter_param_optimizer_state *st = order[i].item;
        const wfield sf[2] = {{PS_PARAM_NAME, 4, 0, true}, {PS_MOMENTUMS, 4, 0, true}};
        size_t sp[2];
        s = w_table(w, sf, 2, elems + 4 * i, sp);
        if (s == OTTER_OK) s = w_string(w, st->param_name, strlen(st->param_name), sp[0]);
        if (s == OTTER_OK) s = w_tensors(x, st->momentums, st->n_momentums, sp[1]);
    }
    ot_free(order);
    return s;
}

static otter_status w_properties(wctx *x, const otter_checkpoint *c, size_t link_from) {
    fbw *w = &x->w;
    size_t count[3] = {0, 0, 0};
    for (size_t i = 0; i < c->n_props; i++) count[c->props[i].type]++;
    wfield f[3];
    int nf = 0, at[3] = {-1, -1, -1};
    for (int k = 0; k < 3; k++)
        if (count[k]) {
            at[k] = nf;
            f[nf++] = (wfield){k, 4, 0, true};
        }
    size_t pos[3];
    OT_TRY(w_table(w, f, nf, link_from, pos));
    named *order = write_order(c->props, c->n_props, sizeof *c->props, offsetof(otter_property, name), x->keep_order);
    if (!order) return OT_NOMEM();
    otter_status s = OTTER_OK;
    for (int k = 0; k < 3 && s == OTTER_OK; k++) {
        if (!count[k]) continue;
        size_t elems, j = 0;
        s = w_ref_vector(w, count[k], pos[at[k]], &elems);
        for (size_t i = 0; i < c->n_props && s == OTTER_OK; i++) {
            const otter_property *p = order[i].item;
            if ((int)p->type != k) continue;
            wfield pf[2];
            int np = 0, i_name, i_value = -1;
            uint32_t bits;
            memcpy(&bits, &p->f, 4);
            if (k == PB_INTS && p->i) pf[np++] = (wfield){PR_VALUE, 8, (uint64_t)p->i, false};
            i_name = np;
            pf[np++] = (wfield){PR_NAME, 4, 0, true};
            if (k == PB_FLOATS && bits) pf[np++] = (wfield){PR_VALUE, 4, bits, false};
            if (k == PB_STRINGS) {
                i_value = np;
                pf[np++] = (wfield){PR_VALUE, 4, 0, true};
            }
            size_t pp[2];
            s = w_table(w, pf, np, elems + 4 * j++, pp);
            if (s == OTTER_OK) s = w_string(w, p->name, strlen(p->name), pp[i_name]);
            if (s == OTTER_OK && i_value >= 0) s = w_string(w, p->s, strlen(p->s), pp[i_value]);
        }
    }
    ot_free(order);
    return s;
}

static otter_status serialize(const otter_checkpoint *c, const otter_checkpoint_save_options *opts, fbw *out) {
    otter_checkpoint_save_options o = opts ? *opts : (otter_checkpoint_save_options){0};
    if (o.version == 0) o.version = OTTER_CHECKPOINT_VERSION;
    if (o.version != 1 && o.version != 2)
        return ot_error(OTTER_ERR_ARGUMENT, "otter writes checkpoint versions 1 and 2, not %d", o.version);
    if (o.version == 1 && c->nominal)
        return ot_error(OTTER_ERR_ARGUMENT, "a nominal state can't be written as version 1 (it has no nominal flag)");
    bool groups = !o.skip_optimizer_state && c->n_groups > 0;
    OT_TRY(validate(c, groups));
    wctx x = {{NULL, 0, 0}, o.keep_order, c->nominal};
    fbw *w = &x.w;
    otter_status s = w_u32(w, 0); /* root offset, linked below */
    if (s == OTTER_OK) s = w_bytes(w, "ODTC", 4);
    wfield f[4] = {{CK_VERSION, 4, (uint64_t)o.version, false}, {CK_MODULE_STATE, 4, 0, true}};
    int nf = 2, i_groups = -1, i_bag = -1;
    if (groups) i_groups = nf, f[nf++] = (wfield){CK_OPTIMIZER_GROUPS, 4, 0, true};
    if (c->n_props) i_bag = nf, f[nf++] = (wfield){CK_PROPERTY_BAG, 4, 0, true};
    size_t pos[4];
    if (s == OTTER_OK) s = w_table(w, f, nf, 0, pos);
    /* module state */
    wfield mf[3] = {{MS_REQUIRES_GRAD, 4, 0, true}, {MS_FROZEN, 4, 0, true}, {MS_IS_NOMINAL, 1, 1, false}};
    size_t mp[3];
    if (s == OTTER_OK) s = w_table(w, mf, c->nominal ? 3 : 2, pos[1], mp);
    if (s == OTTER_OK) s = w_tensors(&x, c->params[0].v, c->params[0].n, mp[0]);
    if (s == OTTER_OK) s = w_tensors(&x, c->params[1].v, c->params[1].n, mp[1]);
    if (s == OTTER_OK && groups) {
        named *order =
            write_order(c->groups, c->n_groups, sizeof *c->groups, offsetof(otter_optimizer_group, name), o.keep_order);
        size_t elems;
        if (!order) s = OT_NOMEM();
        if (s == OTTER_OK) s = w_ref_vector(w, c->n_groups, pos[i_groups], &elems);
        for (size_t i = 0; i < c->n_groups && s == OTTER_OK; i++) s = w_group(&x, order[i].item, elems + 4 * i);
        ot_free(order);
    }
    if (s == OTTER_OK && c->n_props) s = w_properties(&x, c, pos[i_bag]);
    if (s != OTTER_OK) {
        ot_free(w->b);
        return s;
    }
    *out = *w;
    return OTTER_OK;
}

otter_status otter_checkpoint_save_to_memory(const otter_checkpoint *c, const otter_checkpoint_save_options *opts,
                                             void **data, size_t *size) {
    if (!c || !data || !size) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_save_to_memory: NULL argument");
    *data = NULL;
    *size = 0;
    fbw w;
    OT_TRY(serialize(c, opts, &w));
    *data = w.b;
    *size = w.n;
    return OTTER_OK;
}

otter_status otter_checkpoint_save(const otter_checkpoint *c, const char *path,
                                   const otter_checkpoint_save_options *opts) {
    if (!c || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_save: NULL argument");
    fbw w;
    otter_status s = serialize(c, opts, &w);
    if (s == OTTER_OK) {
        s = ot_write_file_atomic(path, w.b, w.n);
        ot_free(w.b);
    }
    if (s != OTTER_OK) ot_error_context(s, "checkpoint '%s': ", path);
    return s;
}
