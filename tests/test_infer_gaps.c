/* Shape rules of infer_extra.c and infer_sequence.c, each checked two ways on small models whose
 * graph outputs are left untyped:
 *   1. the inferred type of every named value equals the one the ONNX definition gives (written
 *      out below), so a rule that says less, or something else, fails;
 *   2. the model is then run and every output the kernels produce (tensors, each element of a
 *      sequence, an optional's value) has the inferred element type, rank and fixed dimensions,
 *      so a rule and its kernel cannot drift apart;
 *   3. inference failing each allocation in turn ends in a clean out-of-memory error, no leak.
 * The random generators and Lp operators, whose rules predate their kernels, are run the same way.
 * Rules left without a case here (StringNormalizer, TfIdfVectorizer, QLinearConv, SequenceMap, the
 * window ops' datatypes) are checked by test_infer_corpus on the ONNX backend models. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/artifacts.h"
#include "otter/autodiff.h"
#include "otter/infer.h"
#include "otter/io.h"
#include "otter/runtime.h"
#include "testutil.h"

/* ---- building a model ---- */

#define MAX_BOUND 16

typedef struct test_model {
    otter_model *m;
    size_t n_bound;
    const char *bound_names[MAX_BOUND];
    otter_tensor *bound[MAX_BOUND]; /* graph inputs' values for the run (owned) */
} test_model;

static otter_tensor *tensor_of(otter_dtype dt, int rank, const int64_t *dims, const void *data) {
    otter_tensor *t = NULL;
    CHECK_OK(data ? otter_tensor_from_data(&t, NULL, dt, rank, dims, data)
                  : otter_tensor_create(&t, NULL, dt, rank, dims));
    return t;
}

/* float values in [-1, 1), deterministic */
static otter_tensor *float_tensor(int rank, const int64_t *dims) {
    otter_tensor *t = tensor_of(OTTER_DTYPE_FLOAT, rank, dims, NULL);
    float *p = t->data;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) p[i] = (float)((i * 7919) % 200) / 100.0f - 1.0f;
    return t;
}

static otter_tensor *int64_tensor(int rank, const int64_t *dims, const int64_t *values) {
    return tensor_of(OTTER_DTYPE_INT64, rank, dims, values);
}

static otter_tensor *int64_scalar(int64_t v) { return int64_tensor(0, NULL, &v); }

static otter_tensor *float_scalar(float v) { return tensor_of(OTTER_DTYPE_FLOAT, 0, NULL, &v); }

static void model_init(test_model *tm, int64_t opset) {
    memset(tm, 0, sizeof *tm);
    CHECK_OK(otter_model_create(&tm->m, "gaps", opset));
}

/* A graph input with value's type and shape, bound to value at run time. */
static void add_input(test_model *tm, const char *name, otter_tensor *value) {
    if (tm->n_bound == MAX_BOUND) {
        CHECK(!"too many inputs: raise MAX_BOUND");
        otter_tensor_free(value);
        return;
    }
    CHECK_OK(otter_graph_add_input(tm->m->graph, name, value->dtype, value->rank, value->dims, NULL));
    tm->bound_names[tm->n_bound] = name;
    tm->bound[tm->n_bound++] = value;
}

/* A constant input (initializer), so rules may read its value. */
static void add_const(test_model *tm, const char *name, otter_tensor *value) {
    CHECK_OK(otter_tensor_set_name(value, name));
    CHECK_OK(otter_graph_add_initializer(tm->m->graph, value));
}

/* A node named after its op type. */
static otter_node *add_node(test_model *tm, const char *op, const char *ins, const char *outs) {
    return tu_add_node(tm->m->graph, op, op, ins, outs);
}

/* A graph output with no type at all: inference gives it one. */
static void add_output(test_model *tm, const char *name) {
    otter_graph *g = tm->m->graph;
    CHECK_OK(otter_graph_add_output(g, name, OTTER_DTYPE_UNDEFINED, -1, NULL, NULL));
    otter_type_clear(&g->outputs[g->n_outputs - 1].type);
    memset(&g->outputs[g->n_outputs - 1].type, 0, sizeof(otter_type));
    g->outputs[g->n_outputs - 1].type.rank = -1;
    g->outputs[g->n_outputs - 1].has_type = false;
}

/* ---- checking ---- */

/* The kernel's tensor fits the inferred type: element type, rank, fixed dims. */
static bool tensor_fits(const otter_type *t, const otter_tensor *x) {
    if (!t || t->kind != OTTER_TYPE_TENSOR || !x) return false;
    if (t->has_elem_type && t->elem_type != x->dtype) return false;
    if (t->rank < 0) return true;
    if (t->rank != x->rank) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i].value >= 0 && t->dims[i].value != x->dims[i]) return false;
    return true;
}

static bool value_fits(const otter_type *t, const otter_arg *a) {
    if (!t) return false;
    switch (t->kind) {
    case OTTER_TYPE_TENSOR:
        return a->kind == OTTER_ARG_TENSOR && tensor_fits(t, a->tensor);
    case OTTER_TYPE_SEQUENCE:
        if (a->kind != OTTER_ARG_SEQUENCE) return false;
        for (size_t i = 0; i < otter_sequence_length(a->sequence); i++)
            if (!tensor_fits(t->elem, otter_sequence_at(a->sequence, i))) return false;
        return true;
    case OTTER_TYPE_OPTIONAL:
        if (a->kind == OTTER_ARG_NONE) return true;
        return t->elem && (t->elem->kind == OTTER_TYPE_SEQUENCE || a->kind == OTTER_ARG_TENSOR) &&
               value_fits(t->elem, a);
    default:
        return false;
    }
}

static void describe(const otter_arg *a, char *buf, size_t size) {
    if (a->kind == OTTER_ARG_TENSOR) {
        size_t k = (size_t)snprintf(buf, size, "%s[", otter_dtype_name(a->tensor->dtype));
        for (int i = 0; i < a->tensor->rank && k < size; i++)
            k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? "," : "", (long long)a->tensor->dims[i]);
        if (k < size) snprintf(buf + k, size - k, "]");
    } else if (a->kind == OTTER_ARG_SEQUENCE) {
        size_t n = otter_sequence_length(a->sequence);
        char first[128] = "";
        if (n) {
            otter_arg e = otter_arg_of_tensor(otter_sequence_at(a->sequence, 0));
            describe(&e, first, sizeof first);
        }
        snprintf(buf, size, "sequence of %zu%s%s", n, n ? ", the first " : "", first);
    } else {
        snprintf(buf, size, "%s", a->kind == OTTER_ARG_NONE ? "no value" : "unset");
    }
}

/* Inference on a copy of m failing allocation k = 1, 2, ... until it succeeds: each failure must
 * be a clean out-of-memory error that leaves nothing allocated once the copy is freed. */
static void infer_alloc_failures(const otter_model *m) {
    int other = 0, leaks = 0;
    long k;
    otter_set_allocator(&tu_counting_allocator);
    for (k = 1;; k++) {
        tu_alloc_fail_at(0);
        long before = tu_alloc_live;
        otter_model *copy = NULL;
        otter_status s = otter_model_clone(&copy, m);
        if (s != OTTER_OK) break;
        tu_alloc_fail_at(k);
        s = otter_model_infer_shapes(copy, &(otter_infer_options){.strict = true});
        tu_alloc_fail_at(0);
        otter_model_free(copy);
        leaks += tu_alloc_live != before;
        if (s == OTTER_OK) break;
        if (s != OTTER_ERR_NOMEM) {
            other++;
            fprintf(stderr, "  failing allocation %ld gave %s: %s\n", k, otter_status_name(s), otter_last_error());
        }
    }
    otter_set_allocator(NULL);
    printf("  inference failing each of %ld allocations: %d other statuses, %d leaking runs\n", k - 1, other, leaks);
    CHECK(k > 1 && other == 0 && leaks == 0);
}

/* expect: "name type" pairs, NULL-terminated; the graph outputs are then run. Frees the model. */
static void check(const char *title, test_model *tm, const char *const *expect) {
    printf("%s\n", title);
    otter_model *m = tm->m;
    infer_alloc_failures(m);
    CHECK_OK(otter_model_infer_shapes(m, &(otter_infer_options){.strict = true}));
    for (const char *const *e = expect; *e; e++) {
        char name[64], want[256], got[256];
        const char *space = strchr(*e, ' ');
        snprintf(name, sizeof name, "%.*s", (int)(space - *e), *e);
        snprintf(want, sizeof want, "%s", space + 1);
        tu_type_text(otter_graph_value_type(m->graph, name), got, sizeof got);
        printf("  %-13s inferred %-26s expected %s\n", name, got, want);
        CHECK(strcmp(got, want) == 0);
    }
    otter_session *s = NULL;
    otter_arg in[MAX_BOUND], out[16];
    size_t n_out = m->graph->n_outputs;
    CHECK(n_out <= sizeof out / sizeof out[0]);
    for (size_t i = 0; i < tm->n_bound; i++) in[i] = otter_arg_of_tensor(tm->bound[i]);
    memset(out, 0, sizeof out);
    CHECK_OK(otter_session_create(&s, m, NULL));
    if (s) {
        CHECK_OK(otter_session_run_args(s, tm->n_bound, tm->bound_names, in, n_out, NULL, out));
        for (size_t i = 0; i < n_out; i++) {
            char inferred[256], ran[256];
            const otter_type *t = &m->graph->outputs[i].type;
            tu_type_text(t, inferred, sizeof inferred);
            describe(&out[i], ran, sizeof ran);
            bool fits = value_fits(t, &out[i]);
            printf("  %-13s kernel gave %-26s %s\n", m->graph->outputs[i].name, ran, fits ? "fits" : "DOES NOT FIT");
            CHECK(fits);
            otter_arg_free(&out[i]);
        }
    }
    otter_session_free(s);
    for (size_t i = 0; i < tm->n_bound; i++) otter_tensor_free(tm->bound[i]);
    otter_model_free(m);
}

/* ---- cases ---- */

static void quantized(void) {
    test_model tm;
    model_init(&tm, 13);
    uint8_t xq[25] = {0}, wq[18] = {0};
    for (int i = 0; i < 25; i++) xq[i] = (uint8_t)(i * 3);
    for (int i = 0; i < 18; i++) wq[i] = (uint8_t)(i % 5);
    add_input(&tm, "x", tensor_of(OTTER_DTYPE_UINT8, 4, (int64_t[]){1, 1, 5, 5}, xq));
    add_input(&tm, "w", tensor_of(OTTER_DTYPE_UINT8, 4, (int64_t[]){2, 1, 3, 3}, wq));
    otter_node *n = add_node(&tm, "ConvInteger", "x w", "conv");
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, (int64_t[]){2, 1}));
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, (int64_t[]){1, 0, 1, 0}));
    uint8_t zero = 0, aq[6] = {1, 2, 3, 4, 5, 6}, bq[12] = {1, 0, 2, 0, 1, 0, 2, 0, 1, 0, 2, 0};
    add_input(&tm, "a", tensor_of(OTTER_DTYPE_UINT8, 2, (int64_t[]){2, 3}, aq));
    add_input(&tm, "b", tensor_of(OTTER_DTYPE_UINT8, 2, (int64_t[]){3, 4}, bq));
    add_const(&tm, "scale", float_scalar(0.5f));
    add_const(&tm, "zp", tensor_of(OTTER_DTYPE_UINT8, 0, NULL, &zero));
    add_node(&tm, "QLinearMatMul", "a scale zp b scale zp scale zp", "mm");
    add_output(&tm, "conv");
    add_output(&tm, "mm");
    check("ConvInteger (strides 2x1, pads 1 top and bottom), QLinearMatMul", &tm,
          (const char *[]){"conv int32[1,2,3,3]", "mm uint8[2,4]", NULL});
}

static void sampling(void) {
    test_model tm;
    model_init(&tm, 16);
    add_input(&tm, "x", float_tensor(4, (int64_t[]){1, 2, 4, 5}));
    add_input(&tm, "grid", float_tensor(4, (int64_t[]){1, 3, 6, 2}));
    add_node(&tm, "GridSample", "x grid", "gs");
    add_input(&tm, "pooled", float_tensor(4, (int64_t[]){1, 1, 2, 2}));
    add_input(&tm, "where", int64_tensor(4, (int64_t[]){1, 1, 2, 2}, (int64_t[]){0, 3, 9, 14}));
    otter_node *n = add_node(&tm, "MaxUnpool", "pooled where", "unpooled");
    CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 3}));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, (int64_t[]){2, 2}));
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, (int64_t[]){0, 1, 0, 0}));
    add_input(&tm, "feat", float_tensor(4, (int64_t[]){1, 3, 8, 8}));
    float boxes[8] = {0, 0, 4, 4, 2, 1, 7, 6};
    add_input(&tm, "rois", tensor_of(OTTER_DTYPE_FLOAT, 2, (int64_t[]){2, 4}, boxes));
    add_input(&tm, "batch", int64_tensor(1, (int64_t[]){2}, (int64_t[]){0, 0}));
    n = add_node(&tm, "RoiAlign", "feat rois batch", "roi");
    CHECK_OK(otter_node_set_attr_int(n, "output_height", 2));
    CHECK_OK(otter_node_set_attr_int(n, "output_width", 3));
    float nms_boxes[12] = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6}, scores[3] = {0.9f, 0.8f, 0.7f};
    add_input(&tm, "boxes", tensor_of(OTTER_DTYPE_FLOAT, 3, (int64_t[]){1, 3, 4}, nms_boxes));
    add_input(&tm, "scores", tensor_of(OTTER_DTYPE_FLOAT, 3, (int64_t[]){1, 1, 3}, scores));
    add_const(&tm, "max_out", int64_scalar(3));
    add_const(&tm, "iou", float_scalar(0.5f));
    add_node(&tm, "NonMaxSuppression", "boxes scores max_out iou", "nms");
    const char *outs[] = {"gs", "unpooled", "roi", "nms"};
    for (int i = 0; i < 4; i++) add_output(&tm, outs[i]);
    check("GridSample, MaxUnpool (kernel 2x3, strides 2, one pad), RoiAlign, NonMaxSuppression", &tm,
          (const char *[]){"gs float32[1,2,3,6]", "unpooled float32[1,1,4,4]", "roi float32[2,3,2,3]", "nms int64[?,3]",
                           NULL});
}

static void unique(void) {
    test_model tm;
    model_init(&tm, 13);
    float v[6] = {1, 2, 1, 3, 2, 1};
    add_input(&tm, "flat", tensor_of(OTTER_DTYPE_FLOAT, 2, (int64_t[]){2, 3}, v));
    add_node(&tm, "Unique", "flat", "y idx inv cnt");
    float rows[8] = {1, 2, 1, 2, 3, 4, 3, 4};
    add_input(&tm, "cols", tensor_of(OTTER_DTYPE_FLOAT, 2, (int64_t[]){2, 4}, rows));
    otter_node *n = add_node(&tm, "Unique", "cols", "ya idxa inva cnta");
    CHECK_OK(otter_node_set_attr_int(n, "axis", -1));
    const char *outs[] = {"y", "idx", "inv", "cnt", "ya", "inva"};
    for (int i = 0; i < 6; i++) add_output(&tm, outs[i]);
    check("Unique flattened and along the last axis", &tm,
          (const char *[]){"y float32[?]", "idx int64[?]", "inv int64[6]", "cnt int64[?]", "ya float32[2,?]",
                           "idxa int64[?]", "inva int64[4]", "cnta int64[?]", NULL});
}

static void signal17(void) {
    test_model tm;
    model_init(&tm, 17);
    add_input(&tm, "x", float_tensor(3, (int64_t[]){2, 8, 1}));
    otter_node *n = add_node(&tm, "DFT", "x", "half");
    CHECK_OK(otter_node_set_attr_int(n, "onesided", 1));
    add_const(&tm, "len10", int64_scalar(10));
    add_node(&tm, "DFT", "x len10", "padded");
    add_input(&tm, "signal", float_tensor(3, (int64_t[]){1, 16, 1}));
    add_const(&tm, "step", int64_scalar(4));
    add_const(&tm, "eight", int64_scalar(8));
    add_node(&tm, "HannWindow", "eight", "hann");
    add_node(&tm, "STFT", "signal step hann", "spec");
    n = add_node(&tm, "BlackmanWindow", "eight", "blackman");
    CHECK_OK(otter_node_set_attr_int(n, "output_datatype", OTTER_DTYPE_DOUBLE));
    add_const(&tm, "mel_bins", int64_scalar(4));
    add_const(&tm, "dft_len", int64_scalar(16));
    add_const(&tm, "rate", int64_scalar(8000));
    add_const(&tm, "low", float_scalar(0.0f));
    add_const(&tm, "high", float_scalar(4000.0f));
    add_node(&tm, "MelWeightMatrix", "mel_bins dft_len rate low high", "mel");
    const char *outs[] = {"half", "padded", "spec", "blackman", "mel"};
    for (int i = 0; i < 5; i++) add_output(&tm, outs[i]);
    check("DFT-17 (onesided; dft_length 10), STFT with a window, windows, MelWeightMatrix", &tm,
          (const char *[]){"half float32[2,5,2]", "padded float32[2,10,2]", "hann float32[8]", "spec float32[1,3,5,2]",
                           "blackman float64[8]", "mel float32[9,4]", NULL});
}

static void dft20(void) {
    test_model tm;
    model_init(&tm, 20);
    add_input(&tm, "x", float_tensor(4, (int64_t[]){2, 6, 3, 2}));
    add_const(&tm, "four", int64_scalar(4));
    add_const(&tm, "axis", int64_scalar(-3));
    add_node(&tm, "DFT", "x four axis", "y");
    add_node(&tm, "DFT", "x", "z"); /* axis -2 by default */
    add_output(&tm, "y");
    add_output(&tm, "z");
    check("DFT-20: axis and dft_length inputs, default axis -2", &tm,
          (const char *[]){"y float32[2,4,3,2]", "z float32[2,6,3,2]", NULL});
}

static void multinomial(void) {
    test_model tm;
    model_init(&tm, 13);
    add_input(&tm, "logits", float_tensor(2, (int64_t[]){3, 4}));
    otter_node *n = add_node(&tm, "Multinomial", "logits", "draws");
    CHECK_OK(otter_node_set_attr_int(n, "sample_size", 5));
    n = add_node(&tm, "Multinomial", "logits", "draws64");
    CHECK_OK(otter_node_set_attr_int(n, "dtype", OTTER_DTYPE_INT64));
    add_output(&tm, "draws");
    add_output(&tm, "draws64");
    check("Multinomial (sample_size 5; dtype int64)", &tm,
          (const char *[]){"draws int32[3,5]", "draws64 int64[3,1]", NULL});
}

/* rules that existed before their kernels (infer_misc.c, infer_reduce.c, infer_nn.c) */
static void generators_and_lp(void) {
    test_model tm;
    model_init(&tm, 15);
    otter_node *n = add_node(&tm, "RandomNormal", "", "normal");
    CHECK_OK(otter_node_set_attr_ints(n, "shape", 3, (int64_t[]){2, 0, 5}));
    CHECK_OK(otter_node_set_attr_int(n, "dtype", OTTER_DTYPE_DOUBLE));
    add_input(&tm, "x", float_tensor(4, (int64_t[]){2, 3, 4, 5}));
    n = add_node(&tm, "RandomUniformLike", "x", "uniform");
    CHECK_OK(otter_node_set_attr_int(n, "dtype", OTTER_DTYPE_FLOAT16));
    add_input(&tm, "p", tensor_of(OTTER_DTYPE_FLOAT, 1, (int64_t[]){4}, (float[]){0, 0.5f, 1, 0.25f}));
    n = add_node(&tm, "Bernoulli", "p", "coin");
    CHECK_OK(otter_node_set_attr_int(n, "dtype", OTTER_DTYPE_BOOL));
    add_node(&tm, "LpNormalization", "x", "normalized");
    add_node(&tm, "GlobalLpPool", "x", "pooled");
    const char *outs[] = {"normal", "uniform", "coin", "normalized", "pooled"};
    for (int i = 0; i < 5; i++) add_output(&tm, outs[i]);
    check("RandomNormal, RandomUniformLike, Bernoulli (with dtype), LpNormalization, GlobalLpPool", &tm,
          (const char *[]){"normal float64[2,0,5]", "uniform float16[2,3,4,5]", "coin bool[4]",
                           "normalized float32[2,3,4,5]", "pooled float32[2,3,1,1]", NULL});
}

static void sequences(void) {
    test_model tm;
    model_init(&tm, 13);
    add_input(&tm, "a", float_tensor(2, (int64_t[]){2, 3}));
    add_input(&tm, "b", float_tensor(2, (int64_t[]){4, 3}));
    add_node(&tm, "SequenceConstruct", "a b", "ab");
    add_const(&tm, "one", int64_scalar(1));
    add_node(&tm, "SequenceAt", "ab one", "second");
    add_node(&tm, "SequenceLength", "ab", "len");
    otter_node *n = add_node(&tm, "ConcatFromSequence", "ab", "cat");
    CHECK_OK(otter_node_set_attr_int(n, "axis", 0));
    add_node(&tm, "SequenceEmpty", "", "empty");
    add_node(&tm, "SequenceInsert", "empty a", "just_a");
    add_node(&tm, "SequenceInsert", "just_a b one", "a_b");
    add_node(&tm, "SequenceErase", "a_b", "erased");
    add_input(&tm, "x", float_tensor(2, (int64_t[]){6, 4}));
    add_const(&tm, "two", int64_scalar(2));
    add_node(&tm, "SplitToSequence", "x two", "pairs");
    n = add_node(&tm, "SplitToSequence", "x", "rows");
    CHECK_OK(otter_node_set_attr_int(n, "keepdims", 0));
    n = add_node(&tm, "SplitToSequence", "x", "cols");
    CHECK_OK(otter_node_set_attr_int(n, "axis", 1));
    add_const(&tm, "sizes", int64_tensor(1, (int64_t[]){2}, (int64_t[]){1, 5}));
    add_node(&tm, "SplitToSequence", "x sizes", "uneven");
    n = add_node(&tm, "ConcatFromSequence", "rows", "stacked");
    CHECK_OK(otter_node_set_attr_int(n, "axis", -1));
    CHECK_OK(otter_node_set_attr_int(n, "new_axis", 1));
    const char *outs[] = {"ab",    "second", "len",  "cat",    "just_a", "erased",
                          "pairs", "rows",   "cols", "uneven", "stacked"};
    for (int i = 0; i < 11; i++) add_output(&tm, outs[i]);
    check("SequenceConstruct/At/Length/Empty/Insert/Erase, SplitToSequence, ConcatFromSequence", &tm,
          (const char *[]){"ab seq(float32[?,3])", "second float32[?,3]", "len int64[]", "cat float32[?,3]",
                           "empty seq(float32)", "just_a seq(float32[2,3])", "a_b seq(float32[?,3])",
                           "erased seq(float32[?,3])", "pairs seq(float32[2,4])", "rows seq(float32[4])",
                           "cols seq(float32[6,1])", "uneven seq(float32[?,4])", "stacked float32[4,?]", NULL});
}

static void optionals(void) {
    test_model tm;
    model_init(&tm, 18);
    add_input(&tm, "x", float_tensor(2, (int64_t[]){2, 3}));
    add_node(&tm, "Optional", "x", "opt");
    add_node(&tm, "OptionalHasElement", "opt", "has");
    add_node(&tm, "OptionalGetElement", "opt", "got");
    add_node(&tm, "SequenceConstruct", "x x", "seq");
    add_node(&tm, "Optional", "seq", "opt_seq");
    add_node(&tm, "OptionalGetElement", "opt_seq", "got_seq");
    add_node(&tm, "OptionalGetElement", "x", "passed"); /* opset 18: a tensor passes through */
    const char *outs[] = {"opt", "has", "got", "opt_seq", "got_seq", "passed"};
    for (int i = 0; i < 6; i++) add_output(&tm, outs[i]);
    check("Optional, OptionalHasElement, OptionalGetElement (tensor and sequence)", &tm,
          (const char *[]){"opt optional(float32[2,3])", "has bool[]", "got float32[2,3]",
                           "opt_seq optional(seq(float32[2,3]))", "got_seq seq(float32[2,3])", "passed float32[2,3]",
                           NULL});
}

/* A training graph from otter_model_add_gradients (com.microsoft ConvGrad, BatchNormInternal,
 * BatchNormalizationGrad, MaxPoolGrad, AveragePoolGrad, GatherGrad, SliceGrad,
 * LayerNormalizationGrad, SoftmaxCrossEntropyLossGrad, ...), its value_info dropped: strict
 * inference types every value, and the gradients the kernels compute fit. */
static void training_graph(void) {
    test_model tm;
    model_init(&tm, 17);
    otter_graph *g = tm.m->graph;
    add_input(&tm, "x", float_tensor(4, (int64_t[]){2, 3, 8, 8}));
    add_input(&tm, "labels", int64_tensor(1, (int64_t[]){2}, (int64_t[]){1, 4}));
    add_const(&tm, "w", float_tensor(4, (int64_t[]){4, 3, 3, 3}));
    add_const(&tm, "b", float_tensor(1, (int64_t[]){4}));
    add_const(&tm, "gamma", float_tensor(1, (int64_t[]){4}));
    add_const(&tm, "beta", float_tensor(1, (int64_t[]){4}));
    add_const(&tm, "mean", float_tensor(1, (int64_t[]){4}));
    otter_tensor *var = float_tensor(1, (int64_t[]){4});
    for (int i = 0; i < 4; i++) ((float *)var->data)[i] = 1.0f + (float)i;
    add_const(&tm, "var", var);
    add_const(&tm, "cols", int64_tensor(1, (int64_t[]){12}, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
    add_const(&tm, "starts", int64_tensor(1, (int64_t[]){1}, (int64_t[]){2}));
    add_const(&tm, "ends", int64_tensor(1, (int64_t[]){1}, (int64_t[]){10}));
    add_const(&tm, "axes", int64_tensor(1, (int64_t[]){1}, (int64_t[]){1}));
    add_const(&tm, "ln_scale", float_tensor(1, (int64_t[]){8}));
    add_const(&tm, "w2", float_tensor(2, (int64_t[]){8, 5}));
    otter_node *n = add_node(&tm, "Conv", "x w b", "conv");
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1}));
    n = add_node(&tm, "BatchNormalization", "conv gamma beta mean var", "bn");
    CHECK_OK(otter_node_set_attr_int(n, "training_mode", 1));
    add_node(&tm, "Relu", "bn", "relu");
    n = add_node(&tm, "MaxPool", "relu", "mp");
    CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2}));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, (int64_t[]){2, 2}));
    n = add_node(&tm, "AveragePool", "mp", "ap");
    CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2}));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, (int64_t[]){2, 2}));
    add_node(&tm, "Flatten", "ap", "flat");
    n = add_node(&tm, "Gather", "flat cols", "picked");
    CHECK_OK(otter_node_set_attr_int(n, "axis", 1));
    add_node(&tm, "Slice", "picked starts ends axes", "sliced");
    add_node(&tm, "LayerNormalization", "sliced ln_scale", "ln");
    add_node(&tm, "MatMul", "ln w2", "logits");
    add_node(&tm, "SoftmaxCrossEntropyLoss", "logits labels", "loss");
    CHECK_OK(otter_graph_add_output(g, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
    const char *wrt[] = {"w", "b", "gamma", "beta", "ln_scale", "w2"};
    CHECK_OK(otter_model_add_gradients(tm.m, &(otter_grad_options){"loss", 6, wrt}));
    g = tm.m->graph;
    for (size_t i = 0; i < g->n_value_info; i++) {
        otter_type_clear(&g->value_info[i].type);
        otter_free(g->value_info[i].name);
    }
    g->n_value_info = 0;
    otter_type_clear(&g->outputs[0].type); /* loss: typed by inference too */
    memset(&g->outputs[0].type, 0, sizeof(otter_type));
    g->outputs[0].type.rank = -1;
    g->outputs[0].has_type = false;
    const char *grads[] = {"w_grad",        "b_grad",  "gamma_grad", "beta_grad",
                           "ln_scale_grad", "w2_grad", "mp_grad",    "relu_grad"};
    for (int i = 0; i < 8; i++) add_output(&tm, grads[i]);
    printf("  %zu nodes after otter_model_add_gradients:", g->n_nodes);
    for (size_t i = 0; i < g->n_nodes; i++) printf(" %s", g->nodes[i]->op_type);
    printf("\n");
    check("training graph of Conv, BatchNormalization, MaxPool, AveragePool, Gather, Slice, LayerNormalization", &tm,
          (const char *[]){"loss float32[]", "w_grad float32[4,3,3,3]", "b_grad float32[4]", "gamma_grad float32[4]",
                           "beta_grad float32[4]", "ln_scale_grad float32[8]", "w2_grad float32[8,5]",
                           "mp_grad float32[2,4,4,4]", "relu_grad float32[2,4,8,8]", NULL});
}

/* Strict inference succeeds (every operator has a rule, no conflict with a declared type) and
 * types every node output. */
static void infer_all_typed(const char *label, otter_model *m) {
    otter_infer_stats st;
    otter_status s = otter_model_infer_shapes_ex(m, &(otter_infer_options){.strict = true}, &st);
    printf("  %-20s %zu nodes, %zu without a rule, %zu of their outputs typed: %s\n", label, st.n_nodes,
           st.n_unknown_ops, st.n_outputs_typed, s == OTTER_OK ? "ok" : otter_last_error());
    CHECK(s == OTTER_OK && st.n_unknown_ops == 0);
    otter_graph *g = m->graph;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs; j++) {
            const char *out = g->nodes[i]->outputs[j];
            const otter_type *t = out[0] ? otter_graph_value_type(g, out) : NULL;
            if (out[0] && (!t || t->kind == OTTER_TYPE_NONE)) {
                printf("    output '%s' of %s left untyped\n", out, g->nodes[i]->op_type);
                CHECK(!"every output typed");
            }
        }
}

/* Training artifacts (InPlaceAccumulatorV2, SoftmaxCrossEntropyLossInternal(Grad), AdamWOptimizer or
 * SGDOptimizerV2 over sequences, ...): strict inference types every node's outputs, agreeing with
 * the types the artifacts declare. */
static void artifacts(otter_optimizer_kind optimizer, const char *label) {
    printf("training artifacts, %s\n", label);
    test_model tm;
    model_init(&tm, 17);
    add_input(&tm, "x", float_tensor(2, (int64_t[]){4, 6}));
    add_const(&tm, "w", float_tensor(2, (int64_t[]){6, 3}));
    add_const(&tm, "b", float_tensor(1, (int64_t[]){3}));
    add_node(&tm, "MatMul", "x w", "xw");
    add_node(&tm, "Add", "xw b", "logits");
    CHECK_OK(otter_graph_add_output(tm.m->graph, "logits", OTTER_DTYPE_FLOAT, 2, (int64_t[]){4, 3}, NULL));
    otter_artifacts a;
    memset(&a, 0, sizeof a);
    otter_artifacts_options o = {0};
    o.loss = OTTER_LOSS_CROSS_ENTROPY;
    o.optimizer = optimizer;
    CHECK_OK(otter_artifacts_build(&a, tm.m, &o));
    otter_model *models[3] = {a.training, a.eval, a.optimizer};
    const char *names[3] = {"training", "eval", "optimizer"};
    for (int k = 0; k < 3; k++)
        if (models[k]) infer_all_typed(names[k], models[k]);
    otter_artifacts_free(&a);
    for (size_t i = 0; i < tm.n_bound; i++) otter_tensor_free(tm.bound[i]);
    otter_model_free(tm.m);
}

/* The artifacts ONNX Runtime generated for an MNIST MLP (tests/data/ort-flat-mnist), with the
 * types ORT declares. */
static void ort_artifacts(void) {
    printf("ONNX Runtime's artifacts (tests/data/ort-flat-mnist)\n");
    const char *files[3] = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"};
    for (int k = 0; k < 3; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/ort-flat-mnist/%s", files[k]);
        otter_model *m = NULL;
        CHECK_OK(otter_model_load(&m, tu_src_path(rel)));
        if (m) infer_all_typed(files[k], m);
        otter_model_free(m);
    }
}

/* An inconsistent model is refused with the node named. */
static void errors(void) {
    printf("errors\n");
    test_model tm;
    model_init(&tm, 16);
    add_input(&tm, "x", float_tensor(4, (int64_t[]){1, 2, 4, 5}));
    add_input(&tm, "grid", float_tensor(4, (int64_t[]){1, 3, 6, 3}));
    add_node(&tm, "GridSample", "x grid", "gs");
    add_output(&tm, "gs");
    CHECK_STATUS(otter_model_infer_shapes(tm.m, NULL), OTTER_ERR_INVALID);
    printf("  %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "GridSample") && strstr(otter_last_error(), "'grid'"));
    for (size_t i = 0; i < tm.n_bound; i++) otter_tensor_free(tm.bound[i]);
    otter_model_free(tm.m);
}

int main(void) {
    quantized();
    sampling();
    unique();
    signal17();
    dft20();
    multinomial();
    generators_and_lp();
    sequences();
    optionals();
    training_graph();
    artifacts(OTTER_OPTIM_ADAMW, "AdamW");
    artifacts(OTTER_OPTIM_SGD, "SGD");
    ort_artifacts();
    errors();
    return tu_finish("test_infer_gaps");
}
