/* Checkpoints in ORT's flatbuffer format: the real fixture written by ORT 1.18's Python tool, round trips of
 * states with optimizer groups, properties, string tensors, nominal states and version 1, every truncation
 * and thousands of corruptions of a small checkpoint (clean error or a state that saves again, never a crash),
 * and one hand-assembled flatbuffer per malformed structure with the error it must give. */
#include <stdlib.h>
#include <string.h>

#include "otter/checkpoint.h"
#include "testutil.h"

/* A copy of ../shared/fixtures/ort-flat-mnist (ORT 1.18's Python tool, MNIST DNN 784-200-200-10). */
#define FIXTURE OTTER_SOURCE_DIR "/tests/data/ort-flat-mnist/checkpoint"

static const void *find_bytes(const void *hay, size_t hn, const void *needle, size_t nn) {
    const unsigned char *h = hay;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(h + i, needle, nn) == 0) return h + i;
    return NULL;
}

/* Equal tensors, also when both are nominal (data NULL). */
static bool tensor_same(const otter_tensor *a, const otter_tensor *b) {
    if (!a || !b || strcmp(a->name, b->name) != 0) return false;
    if (!a->data || !b->data) {
        if (a->dtype != b->dtype || a->rank != b->rank || (a->data != NULL) != (b->data != NULL)) return false;
        for (int i = 0; i < a->rank; i++)
            if (a->dims[i] != b->dims[i]) return false;
        return true;
    }
    return otter_tensor_equal(a, b);
}

/* Same content; with sorted, b's lists may be in another order (compare by name). */
static bool state_same(const otter_checkpoint *a, const otter_checkpoint *b) {
    if (otter_checkpoint_is_nominal(a) != otter_checkpoint_is_nominal(b)) return false;
    for (int k = 0; k < 2; k++) {
        if (otter_checkpoint_param_count(a, k) != otter_checkpoint_param_count(b, k)) return false;
        for (size_t i = 0; i < otter_checkpoint_param_count(a, k); i++) {
            const otter_tensor *x = otter_checkpoint_param_at(a, k, i), *y;
            otter_param_kind kind;
            if (otter_checkpoint_get_param(b, x->name, &y, &kind) != OTTER_OK || (int)kind != k) return false;
            if (!tensor_same(x, y)) return false;
        }
    }
    if (otter_checkpoint_group_count(a) != otter_checkpoint_group_count(b)) return false;
    for (size_t g = 0; g < otter_checkpoint_group_count(a); g++) {
        const otter_optimizer_group *x = otter_checkpoint_group_at(a, g), *y;
        if (otter_checkpoint_get_group(b, x->name, &y) != OTTER_OK) return false;
        if (x->step != y->step || memcmp(&x->initial_learning_rate, &y->initial_learning_rate, 4) != 0) return false;
        if (x->n_states != y->n_states) return false;
        for (size_t j = 0; j < x->n_states; j++) {
            const otter_param_optimizer_state *s = &x->states[j];
            for (size_t m = 0; m < s->n_momentums; m++) {
                const otter_tensor *t;
                if (otter_checkpoint_get_optimizer_state(b, x->name, s->param_name, s->momentums[m]->name, &t) !=
                        OTTER_OK ||
                    !tensor_same(s->momentums[m], t))
                    return false;
            }
        }
    }
    if (otter_checkpoint_property_count(a) != otter_checkpoint_property_count(b)) return false;
    for (size_t i = 0; i < otter_checkpoint_property_count(a); i++) {
        const otter_property *p = otter_checkpoint_property_at(a, i), *q;
        if (otter_checkpoint_get_property(b, p->name, &q) != OTTER_OK || p->type != q->type) return false;
        if (p->type == OTTER_PROPERTY_INT && p->i != q->i) return false;
        if (p->type == OTTER_PROPERTY_FLOAT && memcmp(&p->f, &q->f, 4) != 0) return false;
        if (p->type == OTTER_PROPERTY_STRING && strcmp(p->s, q->s) != 0) return false;
    }
    return true;
}

/* save -> load -> save: the state survives and the second buffer is byte-identical to the first. */
static void round_trip(const char *label, const otter_checkpoint *c, const otter_checkpoint_save_options *o,
                       otter_checkpoint **reloaded, size_t *size_out) {
    void *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    otter_checkpoint *r = NULL;
    CHECK_OK(otter_checkpoint_save_to_memory(c, o, &b1, &n1));
    CHECK_OK(otter_checkpoint_load_from_memory(&r, b1, n1));
    if (r) {
        CHECK(state_same(c, r));
        CHECK_OK(otter_checkpoint_save_to_memory(r, o, &b2, &n2));
        CHECK(n1 == n2 && b1 && b2 && memcmp(b1, b2, n1) == 0);
    }
    printf("%s: %zu bytes written, reloaded state %s, re-saved %zu bytes %s\n", label, n1,
           r && state_same(c, r) ? "equal" : "DIFFERENT", n2,
           n1 == n2 && b1 && b2 && memcmp(b1, b2, n1) == 0 ? "byte-identical" : "DIFFERENT");
    if (size_out) *size_out = n1;
    if (reloaded)
        *reloaded = r;
    else
        otter_checkpoint_free(r);
    otter_free(b1);
    otter_free(b2);
}

/* ---- the fixture (ORT 1.18 Python tool, MNIST DNN 784-200-200-10) -------------------------------------- */

static void test_fixture(void) {
    const char *path = FIXTURE;
    otter_checkpoint *c = NULL;
    CHECK_OK(otter_checkpoint_load(&c, path));
    if (!c) return;
    static const char *names[6] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"};
    static const int64_t dims[6][2] = {{200, 784}, {200, 0}, {200, 200}, {200, 0}, {10, 200}, {10, 0}};
    CHECK(otter_checkpoint_version(c) == 2);
    CHECK(!otter_checkpoint_is_nominal(c));
    CHECK(otter_checkpoint_param_count(c, OTTER_PARAM_TRAINABLE) == 6);
    CHECK(otter_checkpoint_param_count(c, OTTER_PARAM_FROZEN) == 0);
    CHECK(otter_checkpoint_group_count(c) == 0);
    CHECK(otter_checkpoint_property_count(c) == 0);
    size_t file_n = 0;
    unsigned char *file = tu_read_file(path, &file_n);
    int64_t total = 0;
    int found = 0;
    for (size_t i = 0; i < 6 && i < otter_checkpoint_param_count(c, OTTER_PARAM_TRAINABLE); i++) {
        const otter_tensor *t = otter_checkpoint_param_at(c, OTTER_PARAM_TRAINABLE, i);
        int rank = dims[i][1] ? 2 : 1;
        CHECK(strcmp(t->name, names[i]) == 0);
        CHECK(t->dtype == OTTER_DTYPE_FLOAT && t->rank == rank && t->dims[0] == dims[i][0] &&
              (rank == 1 || t->dims[1] == dims[i][1]));
        total += otter_tensor_numel(t);
        /* The values are the file's bytes (found verbatim in it), so no offset is off by a few. */
        if (file && find_bytes(file, file_n, t->data, otter_tensor_nbytes(t))) found++;
        if (rank == 2)
            printf("fixture: %-10s float32 [%lld, %lld] %zu bytes\n", t->name, (long long)t->dims[0],
                   (long long)t->dims[1], otter_tensor_nbytes(t));
        else
            printf("fixture: %-10s float32 [%lld] %zu bytes\n", t->name, (long long)t->dims[0], otter_tensor_nbytes(t));
    }
    CHECK(total == 199210);
    CHECK(found == 6);
    const otter_tensor *b3;
    CHECK_OK(otter_checkpoint_get_param(c, "fc3.bias", &b3, NULL));
    printf("fixture: %zu bytes, version %d, 6 trainable params with %lld floats (want 199210), %d of 6 found "
           "verbatim in the file\n",
           file_n, otter_checkpoint_version(c), (long long)total, found);

    /* ORT's Python tool order (keep_order) and ORT's live-state order (sorted). */
    otter_checkpoint_save_options keep = {.keep_order = true}, sorted = {0};
    otter_checkpoint *r = NULL;
    size_t n_keep = 0, n_sorted = 0;
    round_trip("fixture, keep order", c, &keep, &r, &n_keep);
    if (r) {
        for (size_t i = 0; i < 6; i++)
            CHECK(strcmp(otter_checkpoint_param_at(r, OTTER_PARAM_TRAINABLE, i)->name, names[i]) == 0);
        otter_checkpoint_free(r);
        r = NULL;
    }
    round_trip("fixture, sorted", c, &sorted, &r, &n_sorted);
    if (r) {
        static const char *want[6] = {"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "fc3.bias", "fc3.weight"};
        for (size_t i = 0; i < 6; i++)
            CHECK(strcmp(otter_checkpoint_param_at(r, OTTER_PARAM_TRAINABLE, i)->name, want[i]) == 0);
        otter_checkpoint_free(r);
    }
    /* Same payload: otter's layout differs from ORT's only in padding and vtable sharing. */
    CHECK(n_keep > 796840 && n_keep < file_n + 256);
    printf("fixture: ORT wrote %zu bytes, otter %zu (kept order) and %zu (sorted)\n", file_n, n_keep, n_sorted);

    /* Through a file: atomic save, load, same state. */
    const char *out = tu_tmp_path("fixture_resaved.ckpt");
    CHECK_OK(otter_checkpoint_save(c, out, &keep));
    otter_checkpoint *f = NULL;
    CHECK_OK(otter_checkpoint_load(&f, out));
    CHECK(f && state_same(c, f));
    otter_checkpoint_free(f);
    free(file);
    otter_checkpoint_free(c);
}

/* ---- states made in memory ------------------------------------------------------------------------------- */

static otter_checkpoint *make_state(bool with_groups, bool with_strings) {
    otter_checkpoint *c = NULL;
    CHECK_OK(otter_checkpoint_create(&c));
    float w[6] = {1, -2, 3.5f, 0, -0.0f, 1e-20f};
    double b[4] = {0.25, -1, 3, 1e300};
    int64_t steps[3] = {-1, 0, INT64_MAX};
    int64_t d23[2] = {2, 3}, d4[1] = {4}, d3[1] = {3};
    otter_tensor *t;
    /* Added out of name order, so sorted and kept orders differ. */
    CHECK_OK(otter_tensor_from_data(&t, "layer.weight", OTTER_DTYPE_FLOAT, 2, d23, w));
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_TRAINABLE, t));
    otter_tensor_free(t);
    CHECK_OK(otter_tensor_from_data(&t, "bias", OTTER_DTYPE_DOUBLE, 1, d4, b));
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_TRAINABLE, t));
    otter_tensor_free(t);
    CHECK_OK(otter_tensor_from_data(&t, "counts", OTTER_DTYPE_INT64, 1, d3, steps));
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_FROZEN, t));
    otter_tensor_free(t);
    CHECK_OK(otter_tensor_create(&t, "scalar", OTTER_DTYPE_UINT8, 0, NULL));
    ((uint8_t *)t->data)[0] = 7;
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_FROZEN, t));
    otter_tensor_free(t);
    int64_t d0[2] = {0, 5};
    CHECK_OK(otter_tensor_create(&t, "empty", OTTER_DTYPE_FLOAT16, 2, d0));
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_FROZEN, t));
    otter_tensor_free(t);
    if (with_strings) {
        otter_bytes s[3] = {{"abc", 3}, {"", 0}, {"a\0b", 3}};
        CHECK_OK(otter_tensor_from_data(&t, "vocab", OTTER_DTYPE_STRING, 1, d3, s));
        CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_FROZEN, t));
        otter_tensor_free(t);
    }
    if (with_groups) {
        CHECK_OK(otter_checkpoint_set_group(c, NULL, 42, 0.001f));
        for (int m = 1; m >= 0; m--) {
            char name[16];
            snprintf(name, sizeof name, "momentum%d", m);
            float mw[6];
            double mb[4];
            for (int i = 0; i < 6; i++) mw[i] = (float)(m + 1) * 0.5f * (float)i;
            for (int i = 0; i < 4; i++) mb[i] = (double)(m + 1) * -0.25 * i;
            CHECK_OK(otter_tensor_from_data(&t, name, OTTER_DTYPE_FLOAT, 2, d23, mw));
            CHECK_OK(otter_checkpoint_add_optimizer_state(c, NULL, "layer.weight", t));
            otter_tensor_free(t);
            CHECK_OK(otter_tensor_from_data(&t, name, OTTER_DTYPE_DOUBLE, 1, d4, mb));
            CHECK_OK(otter_checkpoint_add_optimizer_state(c, NULL, "bias", t));
            otter_tensor_free(t);
        }
        /* A second group made by add_optimizer_state alone: step 0, learning rate 0 (defaults, not written). */
        float z[6] = {0};
        CHECK_OK(otter_tensor_from_data(&t, "momentum0", OTTER_DTYPE_FLOAT, 2, d23, z));
        CHECK_OK(otter_checkpoint_add_optimizer_state(c, "another", "layer.weight", t));
        otter_tensor_free(t);
        double zb[4] = {0};
        CHECK_OK(otter_tensor_from_data(&t, "momentum0", OTTER_DTYPE_DOUBLE, 1, d4, zb));
        CHECK_OK(otter_checkpoint_add_optimizer_state(c, "another", "bias", t));
        otter_tensor_free(t);
    }
    CHECK_OK(otter_checkpoint_set_property_int(c, "epoch", 3));
    CHECK_OK(otter_checkpoint_set_property_int(c, "zero", 0));
    CHECK_OK(otter_checkpoint_set_property_int(c, "neg", INT64_MIN));
    CHECK_OK(otter_checkpoint_set_property_float(c, "loss", 0.125f));
    CHECK_OK(otter_checkpoint_set_property_float(c, "fzero", 0.0f));
    CHECK_OK(otter_checkpoint_set_property_string(c, "note", "trained by otter"));
    CHECK_OK(otter_checkpoint_set_property_string(c, "empty_note", ""));
    return c;
}

static void test_round_trips(void) {
    otter_checkpoint *c = make_state(true, true);
    otter_checkpoint_save_options keep = {.keep_order = true}, sorted = {0};
    otter_checkpoint *r = NULL;
    round_trip("state with groups/properties/strings, sorted", c, &sorted, &r, NULL);
    if (r) {
        CHECK(strcmp(otter_checkpoint_param_at(r, OTTER_PARAM_TRAINABLE, 0)->name, "bias") == 0);
        CHECK(strcmp(otter_checkpoint_group_at(r, 0)->name, "another") == 0);
        CHECK(strcmp(otter_checkpoint_group_at(r, 1)->states[0].param_name, "bias") == 0);
        CHECK(strcmp(otter_checkpoint_group_at(r, 1)->states[0].momentums[0]->name, "momentum0") == 0);
        const otter_property *p;
        CHECK_OK(otter_checkpoint_get_property(r, "neg", &p));
        CHECK(p && p->type == OTTER_PROPERTY_INT && p->i == INT64_MIN);
        CHECK_OK(otter_checkpoint_get_property(r, "note", &p));
        CHECK(p && p->type == OTTER_PROPERTY_STRING && strcmp(p->s, "trained by otter") == 0);
        const otter_optimizer_group *g;
        CHECK_OK(otter_checkpoint_get_group(r, "group0", &g));
        CHECK(g && g->step == 42 && g->initial_learning_rate == 0.001f && g->n_states == 2);
        const otter_tensor *vocab;
        CHECK_OK(otter_checkpoint_get_param(r, "vocab", &vocab, NULL));
        CHECK(vocab && ((otter_bytes *)vocab->data)[2].len == 3 &&
              memcmp(((otter_bytes *)vocab->data)[2].data, "a\0b", 3) == 0);
        otter_checkpoint_free(r);
        r = NULL;
    }
    round_trip("state with groups/properties/strings, kept order", c, &keep, &r, NULL);
    if (r) {
        CHECK(strcmp(otter_checkpoint_param_at(r, OTTER_PARAM_TRAINABLE, 0)->name, "layer.weight") == 0);
        CHECK(strcmp(otter_checkpoint_group_at(r, 0)->states[0].momentums[0]->name, "momentum1") == 0);
        CHECK(strcmp(otter_checkpoint_property_at(r, 0)->name, "epoch") == 0);
        otter_checkpoint_free(r);
    }
    /* Without optimizer state. */
    otter_checkpoint_save_options noopt = {.skip_optimizer_state = true};
    void *b = NULL;
    size_t n = 0;
    CHECK_OK(otter_checkpoint_save_to_memory(c, &noopt, &b, &n));
    CHECK_OK(otter_checkpoint_load_from_memory(&r, b, n));
    CHECK(r && otter_checkpoint_group_count(r) == 0 && otter_checkpoint_param_count(r, OTTER_PARAM_FROZEN) == 4);
    printf("skip_optimizer_state: %zu bytes, %zu groups read back\n", n, r ? otter_checkpoint_group_count(r) : 99);
    otter_checkpoint_free(r);
    otter_free(b);

    /* Version 1 (ORT 1.17): written on request, read back as version 1. */
    otter_checkpoint_save_options v1 = {.version = 1};
    round_trip("version 1", c, &v1, &r, NULL);
    CHECK(r && otter_checkpoint_version(r) == 1);
    otter_checkpoint_free(r);
    otter_checkpoint_save_options v3 = {.version = 3};
    CHECK_STATUS(otter_checkpoint_save_to_memory(c, &v3, &b, &n), OTTER_ERR_ARGUMENT);

    /* Editing: set, remove, replace properties. */
    const otter_tensor *lw;
    CHECK_OK(otter_checkpoint_get_param(c, "layer.weight", &lw, NULL));
    otter_tensor *nw = NULL;
    CHECK_OK(otter_tensor_clone(&nw, lw));
    ((float *)nw->data)[0] = 99;
    CHECK_OK(otter_checkpoint_set_param(c, "layer.weight", nw));
    CHECK_OK(otter_checkpoint_get_param(c, "layer.weight", &lw, NULL));
    CHECK(lw && ((float *)lw->data)[0] == 99);
    int64_t d1[1] = {6};
    otter_tensor *wrong = NULL;
    CHECK_OK(otter_tensor_create(&wrong, "x", OTTER_DTYPE_FLOAT, 1, d1));
    CHECK_STATUS(otter_checkpoint_set_param(c, "layer.weight", wrong), OTTER_ERR_ARGUMENT);
    printf("set_param with [6] for [2, 3]: %s\n", otter_last_error());
    CHECK_STATUS(otter_checkpoint_add_optimizer_state(c, NULL, "layer.weight", wrong), OTTER_ERR_ARGUMENT);
    CHECK_STATUS(otter_checkpoint_add_optimizer_state(c, NULL, "counts", wrong), OTTER_ERR_ARGUMENT);
    CHECK_STATUS(otter_checkpoint_add_param(c, OTTER_PARAM_FROZEN, nw), OTTER_ERR_ARGUMENT); /* name taken */
    CHECK_STATUS(otter_checkpoint_get_param(c, "nope", &lw, NULL), OTTER_ERR_NOT_FOUND);
    otter_tensor_free(wrong);
    otter_tensor_free(nw);
    CHECK_OK(otter_checkpoint_set_property_float(c, "epoch", 2.5f)); /* replaces the int */
    const otter_property *p;
    CHECK_OK(otter_checkpoint_get_property(c, "epoch", &p));
    CHECK(p && p->type == OTTER_PROPERTY_FLOAT && p->f == 2.5f);
    CHECK(otter_checkpoint_property_count(c) == 7);
    CHECK_OK(otter_checkpoint_remove_param(c, "bias"));
    const otter_optimizer_group *g;
    CHECK_OK(otter_checkpoint_get_group(c, NULL, &g));
    CHECK(g && g->n_states == 1);
    round_trip("after edits", c, NULL, NULL, NULL);

    /* The writer refuses a group lacking a trainable parameter's state (ORT's rule). */
    int64_t d2[1] = {2};
    float two[2] = {1, 2};
    otter_tensor *extra = NULL;
    CHECK_OK(otter_tensor_from_data(&extra, "extra", OTTER_DTYPE_FLOAT, 1, d2, two));
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_TRAINABLE, extra));
    otter_tensor_free(extra);
    CHECK_STATUS(otter_checkpoint_save_to_memory(c, NULL, &b, &n), OTTER_ERR_INVALID);
    printf("group without a state for 'extra': %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "'extra'") != NULL);
    CHECK_OK(otter_checkpoint_save_to_memory(c, &noopt, &b, &n));
    otter_free(b);
    otter_checkpoint_free(c);
}

static void test_nominal(void) {
    otter_checkpoint *c = make_state(true, true);
    CHECK_OK(otter_checkpoint_set_nominal(c, true));
    otter_checkpoint *r = NULL;
    size_t n_nominal = 0, n_full = 0;
    round_trip("nominal state", c, NULL, &r, &n_nominal);
    otter_checkpoint *full = make_state(true, true);
    void *b = NULL;
    CHECK_OK(otter_checkpoint_save_to_memory(full, NULL, &b, &n_full));
    otter_free(b);
    CHECK(n_nominal < n_full);
    otter_checkpoint_save_options v1 = {.version = 1};
    size_t n_v1 = 0;
    CHECK_STATUS(otter_checkpoint_save_to_memory(c, &v1, &b, &n_v1), OTTER_ERR_ARGUMENT);
    if (r) {
        const otter_tensor *t;
        CHECK(otter_checkpoint_is_nominal(r));
        CHECK_OK(otter_checkpoint_get_param(r, "layer.weight", &t, NULL));
        CHECK(t && t->data == NULL && t->rank == 2 && t->dims[1] == 3);
        CHECK_STATUS(otter_checkpoint_set_nominal(r, false), OTTER_ERR_INVALID);
        printf("un-nominal before setting values: %s\n", otter_last_error());
        /* Set every parameter and momentum from the full state, then it is a full state again. */
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < otter_checkpoint_param_count(full, k); i++) {
                const otter_tensor *src = otter_checkpoint_param_at(full, k, i);
                CHECK_OK(otter_checkpoint_set_param(r, src->name, src));
            }
        CHECK_STATUS(otter_checkpoint_set_nominal(r, false), OTTER_ERR_INVALID); /* momentums still unset */
        for (size_t g = 0; g < otter_checkpoint_group_count(full); g++) {
            const otter_optimizer_group *gr = otter_checkpoint_group_at(full, g);
            for (size_t j = 0; j < gr->n_states; j++)
                for (size_t m = 0; m < gr->states[j].n_momentums; m++)
                    CHECK_OK(otter_checkpoint_add_optimizer_state(r, gr->name, gr->states[j].param_name,
                                                                  gr->states[j].momentums[m]));
        }
        /* In a nominal state added tensors keep no values, so set_nominal(false) still refuses. */
        CHECK_STATUS(otter_checkpoint_set_nominal(r, false), OTTER_ERR_INVALID);
        otter_checkpoint_free(r);
    }
    printf("nominal: %zu bytes vs %zu for the full state\n", n_nominal, n_full);
    /* A full state: nominal -> set params -> un-nominal (no groups). */
    otter_checkpoint_clear_optimizer_state(full);
    CHECK_OK(otter_checkpoint_create(&r));
    CHECK_OK(otter_checkpoint_set_nominal(r, true));
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < otter_checkpoint_param_count(full, k); i++)
            CHECK_OK(otter_checkpoint_add_param(r, k, otter_checkpoint_param_at(full, k, i)));
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < otter_checkpoint_param_count(full, k); i++) {
            const otter_tensor *src = otter_checkpoint_param_at(full, k, i);
            CHECK_OK(otter_checkpoint_set_param(r, src->name, src));
        }
    CHECK_OK(otter_checkpoint_set_nominal(r, false));
    for (size_t i = 0; i < otter_checkpoint_property_count(full); i++) {
        const otter_property *p = otter_checkpoint_property_at(full, i);
        if (p->type == OTTER_PROPERTY_INT) CHECK_OK(otter_checkpoint_set_property_int(r, p->name, p->i));
        if (p->type == OTTER_PROPERTY_FLOAT) CHECK_OK(otter_checkpoint_set_property_float(r, p->name, p->f));
        if (p->type == OTTER_PROPERTY_STRING) CHECK_OK(otter_checkpoint_set_property_string(r, p->name, p->s));
    }
    CHECK(state_same(full, r));
    printf("nominal -> set every parameter -> full: state equal to the original %s\n",
           state_same(full, r) ? "yes" : "NO");
    otter_checkpoint_free(r);
    otter_checkpoint_free(full);
    otter_checkpoint_free(c);
}

/* ---- corruption ------------------------------------------------------------------------------------------ */

/* A loaded corrupt buffer must give a state that saves and reloads (the reader and writer agree). */
static int accepted_resaves_ok(const void *data, size_t n) {
    otter_checkpoint *c = NULL;
    if (otter_checkpoint_load_from_memory(&c, data, n) != OTTER_OK) {
        CHECK(otter_last_error()[0] != '\0');
        return 0;
    }
    void *b = NULL;
    size_t bn = 0;
    otter_checkpoint *r = NULL;
    CHECK_OK(otter_checkpoint_save_to_memory(c, NULL, &b, &bn));
    CHECK_OK(otter_checkpoint_load_from_memory(&r, b, bn));
    CHECK(r && state_same(c, r));
    otter_checkpoint_free(r);
    otter_free(b);
    otter_checkpoint_free(c);
    return 1;
}

static void test_corruption(void) {
    otter_checkpoint *c = make_state(true, true);
    void *b = NULL;
    size_t n = 0;
    CHECK_OK(otter_checkpoint_save_to_memory(c, NULL, &b, &n));
    otter_checkpoint_free(c);
    if (!b) return;
    unsigned char *buf = malloc(n);
    /* Every truncation fails with a message (the last object ends the buffer). */
    int trunc_fail = 0, with_byte = 0;
    for (size_t len = 0; len < n; len++) {
        memcpy(buf, b, len);
        otter_checkpoint *t = NULL;
        otter_status s = otter_checkpoint_load_from_memory(&t, len ? buf : NULL, len);
        if (s == OTTER_ERR_INVALID) trunc_fail++;
        if (s != OTTER_OK && strstr(otter_last_error(), "byte")) with_byte++;
        otter_checkpoint_free(t);
    }
    CHECK(trunc_fail == (int)n);
    CHECK(with_byte >= (int)n - 8);
    printf("truncation: %d of %zu prefixes refused as invalid, %d messages name a byte offset\n", trunc_fail, n,
           with_byte);
    /* Every byte flipped three ways; then multi-byte random damage. */
    static const unsigned char masks[3] = {0x01, 0x80, 0xff};
    int flips = 0, flip_ok = 0;
    for (size_t i = 0; i < n; i++)
        for (int m = 0; m < 3; m++) {
            memcpy(buf, b, n);
            buf[i] ^= masks[m];
            flip_ok += accepted_resaves_ok(buf, n);
            flips++;
        }
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    int rnd = 0, rnd_ok = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, b, n);
        for (int k = 0; k < 4; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t at = (size_t)(seed >> 33) % n;
            unsigned char v = (unsigned char)(seed >> 20);
            buf[at] = (it & 1) ? v : (unsigned char)(buf[at] + (v & 7) - 3);
        }
        rnd_ok += accepted_resaves_ok(buf, n);
        rnd++;
    }
    printf("corruption: %d single-byte flips (%d still valid, re-saved and re-read equal), %d random 4-byte damages "
           "(%d still valid), no crash\n",
           flips, flip_ok, rnd, rnd_ok);
    CHECK(flip_ok < flips && rnd_ok < rnd);
    free(buf);
    otter_free(b);
}

/* ---- hand-assembled flatbuffers: one per malformed structure ------------------------------------------------ */

/* A tiny independent flatbuffer assembler (front to back, like otter's writer but written separately). */
typedef struct asmb {
    unsigned char b[1024];
    size_t n;
} asmb;
static size_t a_pad(asmb *a, size_t align, size_t shift) {
    while ((a->n + shift) % align) a->b[a->n++] = 0;
    return a->n;
}
static size_t a_u16(asmb *a, uint16_t v) {
    memcpy(a->b + a->n, &v, 2);
    a->n += 2;
    return a->n - 2;
}
static size_t a_u32(asmb *a, uint32_t v) {
    memcpy(a->b + a->n, &v, 4);
    a->n += 4;
    return a->n - 4;
}
static size_t a_u64(asmb *a, uint64_t v) {
    a_pad(a, 8, 0);
    memcpy(a->b + a->n, &v, 8);
    a->n += 8;
    return a->n - 8;
}
static void a_link(asmb *a, size_t slot, size_t target) {
    uint32_t v = (uint32_t)(target - slot);
    memcpy(a->b + slot, &v, 4);
}
/* vtable with nslots entries (offsets filled by the caller via a_field), then the soffset; returns the table. */
static size_t a_table(asmb *a, int nslots, size_t *vt, uint16_t tsize) {
    a_pad(a, 4, 0);
    *vt = a->n;
    a_u16(a, (uint16_t)(4 + 2 * nslots));
    a_u16(a, tsize);
    for (int i = 0; i < nslots; i++) a_u16(a, 0);
    a_pad(a, 8, 4);
    size_t t = a->n;
    a_u32(a, (uint32_t)(t - *vt));
    return t;
}
static void a_field(asmb *a, size_t vt, size_t table, int slot, size_t at) {
    uint16_t off = (uint16_t)(at - table);
    memcpy(a->b + vt + 4 + 2 * slot, &off, 2);
}
static size_t a_string(asmb *a, const char *s, bool nul) {
    a_pad(a, 4, 0);
    size_t p = a_u32(a, (uint32_t)strlen(s));
    memcpy(a->b + a->n, s, strlen(s));
    a->n += strlen(s);
    a->b[a->n++] = nul ? 0 : 'X';
    return p;
}

typedef struct variant {
    const char *label;
    otter_status want;
    const char *want_text; /* a phrase the message must contain */
    int32_t version;
    bool no_frozen;
    bool external;
    bool nominal;
    bool name_without_nul;
    uint32_t raw_len; /* bytes of raw_data claimed (8 is right for float [2]) */
    uint32_t frozen_len;
    int bad_soffset;
    char ident[5];
} variant;

/* Checkpoint{version, module_state{requires_grad_params [Tensor w float [2]], frozen_params []}}. */
static size_t assemble(asmb *a, const variant *v) {
    memset(a, 0, sizeof *a);
    size_t root_slot = a_u32(a, 0);
    memcpy(a->b + a->n, v->ident, 4);
    a->n += 4;
    size_t vt, t = a_table(a, 2, &vt, 12);
    a_link(a, root_slot, t);
    if (v->bad_soffset) {
        int32_t so = v->bad_soffset;
        memcpy(a->b + t, &so, 4);
    }
    size_t f_ver = a_u32(a, (uint32_t)v->version);
    size_t f_ms = a_u32(a, 0);
    a_field(a, vt, t, 0, f_ver);
    a_field(a, vt, t, 1, f_ms);
    size_t mvt, ms = a_table(a, 3, &mvt, 16);
    a_link(a, f_ms, ms);
    size_t f_req = a_u32(a, 0), f_frz = a_u32(a, 0);
    a->b[a->n] = v->nominal;
    size_t f_nom = a->n;
    a->n += 4;
    a_field(a, mvt, ms, 0, f_req);
    if (!v->no_frozen) a_field(a, mvt, ms, 1, f_frz);
    a_field(a, mvt, ms, 2, f_nom);
    a_pad(a, 4, 0);
    size_t req = a_u32(a, 1);
    size_t req0 = a_u32(a, 0);
    a_link(a, f_req, req);
    size_t frz = a_u32(a, v->frozen_len);
    a_link(a, f_frz, frz);
    /* Tensor: name, dims, data_type, raw_data, [external_data_offset] */
    size_t tvt, ten = a_table(a, 7, &tvt, 28);
    a_link(a, req0, ten);
    size_t f_ext = a_u64(a, 16);
    size_t f_name = a_u32(a, 0), f_dims = a_u32(a, 0), f_dt = a_u32(a, 1), f_raw = a_u32(a, 0);
    a_field(a, tvt, ten, 0, f_name);
    a_field(a, tvt, ten, 2, f_dims);
    a_field(a, tvt, ten, 3, f_dt);
    a_field(a, tvt, ten, 4, f_raw);
    if (v->external) a_field(a, tvt, ten, 6, f_ext);
    uint16_t ts = (uint16_t)(a->n - ten);
    memcpy(a->b + tvt + 2, &ts, 2);
    a_link(a, f_name, a_string(a, "w", !v->name_without_nul));
    a_pad(a, 8, 4);
    size_t dims = a_u32(a, 1);
    a_u64(a, 2);
    a_link(a, f_dims, dims);
    a_pad(a, 4, 0);
    size_t raw = a_u32(a, v->raw_len);
    float vals[2] = {1.5f, -2.0f};
    memcpy(a->b + a->n, vals, 8);
    a->n += 8;
    a_link(a, f_raw, raw);
    return a->n;
}

static void test_malformed(void) {
    const variant base = {"valid", OTTER_OK, NULL, 2, false, false, false, false, 8, 0, 0, "ODTC"};
    variant vs[12];
    for (int i = 0; i < 12; i++) vs[i] = base;
    int k = 1;
    vs[k++] = (variant){"bad identifier", OTTER_ERR_INVALID, "ODTC", 2, .raw_len = 8, .ident = "ODTX"};
    vs[k++] = (variant){"version 3", OTTER_ERR_UNSUPPORTED, "version 3", 3, .raw_len = 8, .ident = "ODTC"};
    vs[k++] = (variant){"version 0", OTTER_ERR_UNSUPPORTED, "version 0", 0, .raw_len = 8, .ident = "ODTC"};
    vs[k++] = (variant){"version 1", OTTER_OK, NULL, 1, .raw_len = 8, .ident = "ODTC"};
    vs[k++] = (variant){"no frozen_params", OTTER_ERR_INVALID, "frozen_params", 2,
                        .no_frozen = true,  .raw_len = 8,      .ident = "ODTC"};
    vs[k++] = (variant){"external data",  OTTER_ERR_UNSUPPORTED, "external",     2,
                        .external = true, .raw_len = 8,          .ident = "ODTC"};
    vs[k++] = (variant){"raw_data 4 bytes for float [2]",
                        OTTER_ERR_INVALID,
                        "raw_data holds 4 bytes",
                        2,
                        .raw_len = 4,
                        .ident = "ODTC"};
    vs[k++] =
        (variant){"nominal with data", OTTER_ERR_INVALID, "nominal", 2, .nominal = true, .raw_len = 8, .ident = "ODTC"};
    vs[k++] = (variant){"name without NUL",       OTTER_ERR_INVALID, "NUL",          2,
                        .name_without_nul = true, .raw_len = 8,      .ident = "ODTC"};
    vs[k++] = (variant){"frozen vector length 2^30", OTTER_ERR_INVALID, "runs past the end", 2, .raw_len = 8,
                        .frozen_len = 1u << 30,      .ident = "ODTC"};
    vs[k++] = (variant){"vtable out of range", OTTER_ERR_INVALID,      "vtable",       2,
                        .raw_len = 8,          .bad_soffset = -100000, .ident = "ODTC"};
    for (int i = 0; i < k; i++) {
        asmb a;
        size_t n = assemble(&a, &vs[i]);
        otter_checkpoint *c = NULL;
        otter_status s = otter_checkpoint_load_from_memory(&c, a.b, n);
        CHECK(s == vs[i].want);
        if (vs[i].want_text) CHECK(strstr(otter_last_error(), vs[i].want_text) != NULL);
        if (s == OTTER_OK) {
            const otter_tensor *w;
            CHECK_OK(otter_checkpoint_get_param(c, "w", &w, NULL));
            CHECK(w && w->rank == 1 && w->dims[0] == 2 && ((float *)w->data)[1] == -2.0f);
            CHECK(otter_checkpoint_version(c) == vs[i].version);
        }
        printf("hand-made %-30s (%3zu bytes): %s%s%s\n", vs[i].label, n, otter_status_name(s), s ? ": " : "",
               s ? otter_last_error() : "");
        otter_checkpoint_free(c);
    }
}

/* ---- streamed saves and external data (ORT 1.18+: "<path>.data", Tensor.external_data_offset) ---------- */

static bool file_bytes(const char *path, void **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(*n ? *n : 1);
    bool ok = *data && fread(*data, 1, *n, f) == *n;
    fclose(f);
    return ok;
}

/* The large-state path on a small state: a threshold of 1 byte sends every tensor of 64 bytes or more to
 * the external data file, as ORT does past its 1800 MiB default. */
static void test_external_data(void) {
    otter_checkpoint *c = make_state(true, true);
    float big[3000];
    for (int i = 0; i < 3000; i++) big[i] = (float)i * 0.5f - 7.0f;
    int64_t d[1] = {3000};
    otter_tensor *t;
    CHECK_OK(otter_tensor_from_data(&t, "big.frozen", OTTER_DTYPE_FLOAT, 1, d, big));
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_FROZEN, t));
    otter_tensor_free(t);
    char path[1024], data_path[1100];
    snprintf(path, sizeof path, "%s", tu_tmp_path("ckpt_external"));
    snprintf(data_path, sizeof data_path, "%s.data", path);
    remove(data_path);

    /* inline, streamed from the tensors: the file equals the in-memory flatbuffer byte for byte */
    void *mem = NULL, *file = NULL;
    size_t n_mem = 0, n_file = 0;
    CHECK_OK(otter_checkpoint_save_to_memory(c, NULL, &mem, &n_mem));
    CHECK_OK(otter_checkpoint_save(c, path, NULL));
    CHECK(file_bytes(path, &file, &n_file) && n_file == n_mem && memcmp(file, mem, n_mem) == 0);
    FILE *probe = fopen(data_path, "rb");
    CHECK(probe == NULL);
    if (probe) fclose(probe);
    printf("inline save to a file: %zu bytes, %s the in-memory save\n", n_file,
           n_file == n_mem && memcmp(file, mem, n_mem) == 0 ? "identical to" : "DIFFERENT from");
    free(file);
    otter_free(mem);

    /* external */
    otter_checkpoint_save_options o = {.external_data_threshold = 1};
    uint64_t plan_file = 0, plan_ext = 0;
    CHECK_OK(otter_checkpoint_save_plan(c, &o, &plan_file, &plan_ext));
    CHECK_OK(otter_checkpoint_save(c, path, &o));
    void *ext = NULL;
    size_t n_ext = 0;
    CHECK(file_bytes(path, &file, &n_file) && n_file == plan_file);
    CHECK(file_bytes(data_path, &ext, &n_ext) && n_ext == plan_ext && n_ext >= sizeof big);
    /* the data sits at an offset the flatbuffer gives, not inline */
    CHECK(find_bytes(ext, n_ext, big, sizeof big) != NULL && find_bytes(file, n_file, big, 64) == NULL);
    otter_checkpoint *r = NULL;
    CHECK(otter_checkpoint_load_from_memory(&r, file, n_file) == OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(otter_last_error(), "external data") != NULL);
    CHECK_OK(otter_checkpoint_load(&r, path));
    CHECK(r && state_same(c, r));
    printf("external data: checkpoint %zu bytes (planned %llu) + %s %zu bytes (planned %llu), reloaded %s\n", n_file,
           (unsigned long long)plan_file, "external data", n_ext, (unsigned long long)plan_ext,
           r && state_same(c, r) ? "equal" : "DIFFERENT");
    /* what loads saves again the same way */
    if (r) {
        void *again = NULL;
        size_t n_again = 0;
        CHECK_OK(otter_checkpoint_save(r, path, &o));
        CHECK(file_bytes(path, &again, &n_again) && n_again == n_file && memcmp(again, file, n_file) == 0);
        free(again);
    }
    otter_checkpoint_free(r);
    r = NULL;

    /* a truncated external data file is an error naming it, never a short read */
    FILE *f = fopen(data_path, "wb");
    CHECK(f && fwrite(ext, 1, n_ext / 2, f) == n_ext / 2);
    if (f) fclose(f);
    CHECK(otter_checkpoint_load(&r, path) == OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "runs past the end") && strstr(otter_last_error(), ".data"));
    printf("external data file cut in half: %s\n", otter_last_error());
    remove(data_path);
    CHECK(otter_checkpoint_load(&r, path) == OTTER_ERR_NOT_FOUND);
    printf("external data file missing: %s\n", otter_last_error());

    /* saving inline again removes the stale external data file */
    CHECK_OK(otter_checkpoint_save(c, path, &o));
    CHECK_OK(otter_checkpoint_save(c, path, NULL));
    probe = fopen(data_path, "rb");
    CHECK(probe == NULL);
    if (probe) fclose(probe);
    CHECK_OK(otter_checkpoint_load(&r, path));
    CHECK(r && state_same(c, r));
    otter_checkpoint_free(r);

    /* version 1 has no external data: a state past 2 GiB can't be written as 1 (checked, not attempted) */
    otter_checkpoint_save_options v1 = {.version = 1, .external_data_threshold = 1};
    CHECK_OK(otter_checkpoint_save_plan(c, &v1, &plan_file, &plan_ext));
    CHECK(plan_ext == 0);
    free(file);
    free(ext);
    remove(path);
    otter_checkpoint_free(c);
}

/* OTTER_CKPT_CORPUS=DIR: write small seed checkpoints for fuzz/fuzz_checkpoint.c into DIR. */
static void write_corpus(const char *dir) {
    otter_checkpoint *c = make_state(true, true);
    char path[1024];
    otter_checkpoint_save_options keep = {.keep_order = true}, v1 = {.version = 1},
                                  noopt = {.skip_optimizer_state = true};
    snprintf(path, sizeof path, "%s/groups_props_strings.ckpt", dir);
    CHECK_OK(otter_checkpoint_save(c, path, &keep));
    snprintf(path, sizeof path, "%s/version1.ckpt", dir);
    CHECK_OK(otter_checkpoint_save(c, path, &v1));
    snprintf(path, sizeof path, "%s/params_only.ckpt", dir);
    CHECK_OK(otter_checkpoint_save(c, path, &noopt));
    CHECK_OK(otter_checkpoint_set_nominal(c, true));
    snprintf(path, sizeof path, "%s/nominal.ckpt", dir);
    CHECK_OK(otter_checkpoint_save(c, path, NULL));
    otter_checkpoint_free(c);
    /* external data: little-endian u32 length, the flatbuffer, then the external data file */
    CHECK_OK(otter_checkpoint_create(&c));
    float w[32];
    for (int i = 0; i < 32; i++) w[i] = (float)i - 3.5f;
    int64_t d[1] = {32};
    otter_tensor *t;
    CHECK_OK(otter_tensor_from_data(&t, "w", OTTER_DTYPE_FLOAT, 1, d, w));
    CHECK_OK(otter_checkpoint_add_param(c, OTTER_PARAM_TRAINABLE, t));
    otter_tensor_free(t);
    otter_checkpoint_save_options ext = {.external_data_threshold = 1};
    snprintf(path, sizeof path, "%s/external.tmp", dir);
    CHECK_OK(otter_checkpoint_save(c, path, &ext));
    void *main_b = NULL, *ext_b = NULL;
    size_t n_main = 0, n_ext = 0;
    char data_path[1100];
    snprintf(data_path, sizeof data_path, "%s.data", path);
    CHECK(file_bytes(path, &main_b, &n_main) && file_bytes(data_path, &ext_b, &n_ext));
    remove(path);
    remove(data_path);
    snprintf(path, sizeof path, "%s/external.ckpt", dir);
    FILE *f = fopen(path, "wb");
    unsigned char len[4] = {(unsigned char)n_main, (unsigned char)(n_main >> 8), (unsigned char)(n_main >> 16),
                            (unsigned char)(n_main >> 24)};
    CHECK(f && fwrite(len, 1, 4, f) == 4 && fwrite(main_b, 1, n_main, f) == n_main &&
          fwrite(ext_b, 1, n_ext, f) == n_ext);
    if (f) fclose(f);
    free(main_b);
    free(ext_b);
    otter_checkpoint_free(c);
    printf("wrote 5 seed checkpoints to %s\n", dir);
}

int main(void) {
    if (getenv("OTTER_CKPT_CORPUS")) write_corpus(getenv("OTTER_CKPT_CORPUS"));
    test_fixture();
    test_round_trips();
    test_nominal();
    test_malformed();
    test_external_data();
    test_corruption();
    return tu_finish("test_checkpoint");
}
