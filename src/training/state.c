/* Training session state: parameters one by one and as one contiguous buffer, properties, the checkpoint
 * brought up to date and saved, and the inference model export. */
#include <errno.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/core.h"
#include "format/checkpoint_internal.h"
#include "otter/artifacts.h"
#include "otter/edit.h"
#include "otter/io.h"
#include "runtime/session.h"
#include "training/training_internal.h"

otter_status ot_training_require_all_set(const otter_training_session *s, const char *what) {
    for (size_t i = 0; i < s->n_params; i++)
        if (!s->params[i].set)
            return ot_error(OTTER_ERR_INVALID,
                            "%s: parameter '%s' has no value (the checkpoint is nominal); set every parameter first "
                            "(otter_training_copy_buffer_to_params with trainable_only = false, or "
                            "otter_training_set_param)",
                            what, s->params[i].name);
    return OTTER_OK;
}

/* ---- contiguous buffers ------------------------------------------------------------------------- */

size_t otter_training_params_size(const otter_training_session *s, bool trainable_only) {
    if (!s) return 0;
    return trainable_only ? s->n_train : s->n_train + s->n_frozen;
}

float *otter_training_trainable_slab(otter_training_session *s, size_t *n) {
    if (n) *n = s ? s->n_train : 0;
    return s ? s->train_slab : NULL;
}

const float *otter_training_grad_slab(const otter_training_session *s, size_t *n) {
    if (n) *n = s ? s->n_train : 0;
    return s ? s->grad_slab : NULL;
}

static otter_status check_size(const otter_training_session *s, const void *buf, size_t n, bool trainable_only,
                               const char *fn) {
    if (!s || (!buf && n)) return ot_error(OTTER_ERR_ARGUMENT, "%s: NULL argument", fn);
    size_t want = otter_training_params_size(s, trainable_only);
    if (n != want)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: the buffer holds %zu floats, the %s parameters %zu", fn, n,
                        trainable_only ? "trainable" : "float32", want);
    return OTTER_OK;
}

otter_status otter_training_copy_params_to_buffer(const otter_training_session *s, float *buf, size_t n,
                                                  bool trainable_only) {
    OT_TRY(check_size(s, buf, n, trainable_only, "otter_training_copy_params_to_buffer"));
    if (trainable_only) {
        if (n) memcpy(buf, s->train_slab, n * sizeof(float)); /* the slab is the buffer, in order */
        return OTTER_OK;
    }
    for (size_t i = 0; i < s->n_params; i++) {
        const ot_training_param *p = &s->params[i];
        if (p->is_f32 && p->numel) memcpy(buf + p->off_all, p->value.data, p->numel * sizeof(float));
    }
    return OTTER_OK;
}

otter_status otter_training_copy_buffer_to_params(otter_training_session *s, const float *buf, size_t n,
                                                  bool trainable_only) {
    OT_TRY(check_size(s, buf, n, trainable_only, "otter_training_copy_buffer_to_params"));
    if (trainable_only) {
        if (n) memcpy(s->train_slab, buf, n * sizeof(float));
    } else {
        for (size_t i = 0; i < s->n_params; i++) {
            ot_training_param *p = &s->params[i];
            if (p->is_f32 && p->numel) memcpy(p->value.data, buf + p->off_all, p->numel * sizeof(float));
        }
    }
    for (size_t i = 0; i < s->n_params; i++)
        if (s->params[i].is_f32 && (s->params[i].trainable || !trainable_only)) s->params[i].set = true;
    return OTTER_OK;
}

/* ---- single parameters ------------------------------------------------------------------------- */

size_t otter_training_param_count(const otter_training_session *s) { return s ? s->n_params : 0; }

const char *otter_training_param_name(const otter_training_session *s, size_t i) {
    return s && i < s->n_params ? s->params[i].name : NULL;
}

static otter_status find(const otter_training_session *s, const char *name, ot_training_param **p) {
    if (!s || !name) return ot_error(OTTER_ERR_ARGUMENT, "training session: NULL session or parameter name");
    *p = ot_training_find_param(s, name);
    if (!*p) return ot_error(OTTER_ERR_NOT_FOUND, "the training session has no parameter '%s'", name);
    return OTTER_OK;
}

otter_status otter_training_describe_param(const otter_training_session *s, const char *name, otter_param_info *info) {
    ot_training_param *p;
    OT_TRY(find(s, name, &p));
    if (!info) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_describe_param: NULL info");
    memset(info, 0, sizeof *info);
    info->dtype = p->value.dtype;
    info->rank = p->value.rank;
    memcpy(info->dims, p->value.dims, sizeof info->dims);
    info->trainable = p->trainable;
    info->offset_all = p->off_all;
    info->offset_trainable = p->off_train;
    return OTTER_OK;
}

otter_status otter_training_get_param(const otter_training_session *s, const char *name, otter_tensor **out) {
    ot_training_param *p;
    OT_TRY(find(s, name, &p));
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_get_param: NULL out");
    if (!p->set) return ot_error(OTTER_ERR_INVALID, "parameter '%s' has no value (nominal checkpoint)", name);
    return otter_tensor_from_data(out, p->name, p->value.dtype, p->value.rank, p->value.dims, p->value.data);
}

otter_status otter_training_set_param(otter_training_session *s, const char *name, const otter_tensor *value) {
    ot_training_param *p;
    OT_TRY(find(s, name, &p));
    if (!value || (!value->data && otter_tensor_numel(value) > 0))
        return ot_error(OTTER_ERR_ARGUMENT, "set parameter '%s': the new value has no data", name);
    bool same = value->dtype == p->value.dtype && value->rank == p->value.rank;
    for (int i = 0; same && i < value->rank; i++) same = value->dims[i] == p->value.dims[i];
    if (!same) {
        const otter_tensor *t[2] = {&p->value, value};
        char buf[2][256];
        for (int k = 0; k < 2; k++) {
            size_t o = (size_t)snprintf(buf[k], sizeof buf[k], "%s [", otter_dtype_name(t[k]->dtype));
            for (int i = 0; i < t[k]->rank && o < sizeof buf[k]; i++)
                o += (size_t)snprintf(buf[k] + o, sizeof buf[k] - o, i ? ", %lld" : "%lld", (long long)t[k]->dims[i]);
            if (o < sizeof buf[k]) snprintf(buf[k] + o, sizeof buf[k] - o, "]");
        }
        return ot_error(OTTER_ERR_ARGUMENT, "set parameter '%s': it is %s, the new value is %s", name, buf[0], buf[1]);
    }
    size_t nb = otter_tensor_nbytes(value);
    if (nb) memcpy(p->value.data, value->data, nb);
    p->set = true;
    return OTTER_OK;
}

/* ---- properties -------------------------------------------------------------------------------- */

otter_status otter_training_set_property_int(otter_training_session *s, const char *name, int64_t v) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_set_property_int: NULL session");
    return otter_checkpoint_set_property_int(s->ck, name, v);
}
otter_status otter_training_set_property_float(otter_training_session *s, const char *name, float v) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_set_property_float: NULL session");
    return otter_checkpoint_set_property_float(s->ck, name, v);
}
otter_status otter_training_set_property_string(otter_training_session *s, const char *name, const char *v) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_set_property_string: NULL session");
    return otter_checkpoint_set_property_string(s->ck, name, v);
}
otter_status otter_training_get_property(const otter_training_session *s, const char *name,
                                         const otter_property **out) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_get_property: NULL session");
    return otter_checkpoint_get_property(s->ck, name, out);
}

/* ---- checkpoint -------------------------------------------------------------------------------- */

/* The checkpoint's parameters and momentums become views of the session's slabs: the state lives once, and
 * a save writes it straight from the slabs. */
otter_status ot_training_share_state(otter_training_session *s) {
    for (size_t i = 0; i < s->n_params; i++) {
        ot_training_param *p = &s->params[i];
        if (p->set && p->value.dtype != OTTER_DTYPE_STRING) OT_TRY(ot_ckpt_view_param(s->ck, p->name, p->value.data));
    }
    if (!s->have_moments) return OTTER_OK;
    for (size_t i = 0; i < s->n_params; i++) {
        ot_training_param *p = &s->params[i];
        if (!p->trainable) continue;
        otter_tensor m = p->value;
        m.name = "momentum0";
        m.data = s->m1 + p->off_train;
        OT_TRY(ot_ckpt_view_momentum(s->ck, "group0", p->name, &m));
        if (s->m2) {
            m.name = "momentum1";
            m.data = s->m2 + p->off_train;
            OT_TRY(ot_ckpt_view_momentum(s->ck, "group0", p->name, &m));
        }
    }
    return OTTER_OK;
}

otter_status otter_training_sync_checkpoint(otter_training_session *s, const otter_checkpoint **out) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_sync_checkpoint: NULL session");
    OT_TRY(ot_training_share_state(s));
    bool all_set = true;
    for (size_t i = 0; i < s->n_params; i++) all_set = all_set && s->params[i].set;
    if (s->have_moments) {
        float lr0 = s->have_sched ? s->sched.initial_lr : s->lr;
        OT_TRY(otter_checkpoint_set_group(s->ck, "group0", s->step, lr0));
    }
    if (all_set && otter_checkpoint_is_nominal(s->ck)) {
        if (!s->have_moments) otter_checkpoint_clear_optimizer_state(s->ck);
        OT_TRY(otter_checkpoint_set_nominal(s->ck, false));
    }
    if (out) *out = s->ck;
    return OTTER_OK;
}

otter_status otter_training_save_checkpoint(otter_training_session *s, const char *path, bool include_optimizer_state) {
    if (!s || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_save_checkpoint: NULL argument");
    OT_TRY(otter_training_sync_checkpoint(s, NULL));
    otter_checkpoint_save_options o = {.skip_optimizer_state = !include_optimizer_state};
    /* the save's buffers take the activations' pages instead of adding to them */
    ot_plan_release_pages(s->train.sess);
    if (s->eval.sess) ot_plan_release_pages(s->eval.sess);
    return otter_checkpoint_save(s->ck, path, &o);
}

otter_status otter_training_check_checkpoint(otter_training_session *s, const char *path,
                                             bool include_optimizer_state) {
    if (!s || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_check_checkpoint: NULL argument");
    OT_TRY(otter_training_sync_checkpoint(s, NULL));
    /* the momentums the first optimizer step creates, not in the state yet */
    uint64_t moments = 0;
    if (include_optimizer_state && !s->have_moments && s->optim != TS_OPTIM_NONE)
        moments = (s->optim == TS_OPTIM_ADAMW ? 2 : 1) * (uint64_t)s->n_train * sizeof(float);
    otter_checkpoint_save_options o = {.skip_optimizer_state = !include_optimizer_state};
    uint64_t file = 0, ext = 0;
    otter_status st = otter_checkpoint_save_plan(s->ck, &o, &file, &ext);
    if (st == OTTER_OK && moments && !ext && file + moments >= OTTER_CHECKPOINT_EXTERNAL_THRESHOLD) {
        ext = file + moments; /* the momentums will move the whole state to external data */
        file = 0;
    } else if (st == OTTER_OK) {
        *(ext ? &ext : &file) += moments;
    }
    char *dir = st == OTTER_OK ? ot_dirname(path) : NULL;
    if (st == OTTER_OK && !dir) st = OT_NOMEM();
    struct statvfs fs;
    if (st == OTTER_OK && (access(dir, W_OK) != 0 || statvfs(dir, &fs) != 0))
        st = ot_error(OTTER_ERR_IO, "folder '%s': %s", dir, strerror(errno));
    if (st == OTTER_OK) {
        uint64_t free_bytes = (uint64_t)fs.f_bavail * fs.f_frsize;
        if (file + ext > free_bytes) /* the new files are written beside the old ones, then renamed */
            st = ot_error(OTTER_ERR_IO,
                          "saving needs %.1f MB (checkpoint %.1f MB, external data %.1f MB) and the file system of "
                          "'%s' has %.1f MB free",
                          (double)(file + ext) / 1e6, (double)file / 1e6, (double)ext / 1e6, dir,
                          (double)free_bytes / 1e6);
    }
    ot_free(dir);
    if (st != OTTER_OK) ot_error_context(st, "checkpoint '%s': ", path);
    return st;
}

/* ---- export ------------------------------------------------------------------------------------ */

static bool name_in(const char *name, size_t n, const char *const *names) {
    for (size_t i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0) return true;
    return false;
}

static bool graph_reads(const otter_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_nodes; i++)
        for (size_t k = 0; k < g->nodes[i]->n_inputs; k++)
            if (strcmp(g->nodes[i]->inputs[k], name) == 0) return true;
    /* subgraphs may read it from the outer scope: keep the input when any node has graph attributes */
    for (size_t i = 0; i < g->n_nodes; i++)
        for (size_t a = 0; a < g->nodes[i]->n_attrs; a++)
            if (g->nodes[i]->attrs[a].type == OTTER_ATTR_GRAPH || g->nodes[i]->attrs[a].type == OTTER_ATTR_GRAPHS)
                return true;
    return otter_graph_find_output(g, name) >= 0;
}

static otter_status export_into(const otter_training_session *s, otter_model *m, size_t n_out,
                                const char *const *names) {
    otter_graph *g = m->graph;
    /* outputs: the ones asked for, in that order */
    for (size_t i = 0; i < n_out; i++) {
        if (!names[i] || !names[i][0]) return ot_error(OTTER_ERR_ARGUMENT, "export: empty output name");
        if (otter_graph_find_output(g, names[i]) >= 0) continue;
        const otter_type *t = otter_graph_value_type(g, names[i]);
        if (otter_graph_find_producer(g, names[i]) < 0 && otter_graph_find_input(g, names[i]) < 0)
            return ot_error(OTTER_ERR_NOT_FOUND, "export: the eval model has no tensor '%s'", names[i]);
        if (t && t->kind == OTTER_TYPE_TENSOR) {
            int64_t d[OTTER_MAX_RANK];
            const char *ps[OTTER_MAX_RANK];
            int r = t->rank > OTTER_MAX_RANK ? OTTER_MAX_RANK : t->rank;
            for (int k = 0; k < r; k++) d[k] = t->dims[k].value, ps[k] = t->dims[k].param;
            OT_TRY(otter_graph_add_output(g, names[i], t->elem_type, r, d, ps));
        } else {
            OT_TRY(otter_graph_add_output(g, names[i], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
        }
    }
    for (size_t i = g->n_outputs; i-- > 0;)
        if (!name_in(g->outputs[i].name, n_out, names)) OT_TRY(otter_graph_delete_output(g, g->outputs[i].name));
    for (size_t i = 0; i < n_out; i++) { /* reorder in place */
        ptrdiff_t j = otter_graph_find_output(g, names[i]);
        if (j >= 0 && (size_t)j != i) {
            otter_value tmp = g->outputs[i];
            g->outputs[i] = g->outputs[j];
            g->outputs[j] = tmp;
        }
    }
    /* parameters back into initializers with the current values */
    for (size_t i = 0; i < s->n_params; i++) {
        const ot_training_param *p = &s->params[i];
        if (otter_graph_find_input(g, p->name) < 0) continue;
        OT_TRY(otter_graph_delete_input(g, p->name));
        otter_tensor *t = NULL;
        OT_TRY(otter_tensor_from_data(&t, p->name, p->value.dtype, p->value.rank, p->value.dims, p->value.data));
        OT_TRY(otter_graph_add_initializer(g, t));
    }
    OT_TRY(otter_graph_clean(g, NULL));
    for (size_t i = g->n_inputs; i-- > 0;)
        if (!graph_reads(g, g->inputs[i].name)) OT_TRY(otter_graph_delete_input(g, g->inputs[i].name));
    return OTTER_OK;
}

otter_status otter_training_export_model(const otter_training_session *s, size_t n_outputs,
                                         const char *const *output_names, otter_model **out) {
    if (!s || !out || (n_outputs && !output_names))
        return ot_error(OTTER_ERR_ARGUMENT, "otter_training_export_model: NULL argument");
    *out = NULL;
    if (!s->eval_m) return ot_error(OTTER_ERR_ARGUMENT, "export: the session has no eval model");
    OT_TRY(ot_training_require_all_set(s, "export"));
    const otter_graph *eg = s->eval_m->graph;
    const char **names = NULL;
    if (n_outputs == 0) { /* the forward model's outputs, as `otter artifacts` recorded them */
        names = ot_calloc(s->eval_m->n_metadata + eg->n_outputs + 1, sizeof *names);
        if (!names) return OT_NOMEM();
        for (size_t k = 0;; k++) {
            char *key = ot_sprintf("%s%zu", OTTER_FORWARD_OUTPUT_KEY, k);
            const char *name = NULL;
            for (size_t i = 0; key && i < s->eval_m->n_metadata; i++)
                if (ot_streq(s->eval_m->metadata[i].key, key)) name = s->eval_m->metadata[i].value;
            ot_free(key);
            if (!name) break;
            names[n_outputs++] = name;
        }
        /* Artifacts without the record (ONNX Runtime's tool): every eval output but the loss (the first). */
        for (size_t i = 1; n_outputs == 0 && i < eg->n_outputs; i++) names[n_outputs++] = eg->outputs[i].name;
        if (n_outputs == 0) {
            ot_free(names);
            return ot_error(OTTER_ERR_ARGUMENT,
                            "export: the eval model records no forward outputs (%s* metadata, written by otter "
                            "artifacts) and has no output besides the loss '%s'; name the outputs to keep",
                            OTTER_FORWARD_OUTPUT_KEY, eg->n_outputs ? eg->outputs[0].name : "");
        }
        output_names = names;
    }
    otter_model *m = NULL;
    otter_status st = otter_model_clone(&m, s->eval_m);
    if (st == OTTER_OK) st = export_into(s, m, n_outputs, output_names);
    ot_free(names);
    if (st != OTTER_OK) {
        otter_model_free(m);
        return ot_error_context(st, "export: ");
    }
    *out = m;
    return OTTER_OK;
}

otter_status otter_training_export(const otter_training_session *s, const char *path, size_t n_outputs,
                                   const char *const *output_names) {
    if (!path) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_export: NULL path");
    otter_model *m = NULL;
    OT_TRY(otter_training_export_model(s, n_outputs, output_names, &m));
    otter_status st = otter_model_save(m, path, NULL);
    otter_model_free(m);
    return st;
}
