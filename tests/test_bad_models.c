/* The model loader on bad input: empty and truncated files, garbage, wrong wire types, dims that
 * overflow, raw_data shorter than its dims, missing external-data files, external-data locations that
 * escape the model's folder, messages nested past protobuf's depth limit (a sequence type 4,393 deep,
 * 2,929 nested If subgraphs, a SequenceProto value 5,000 deep), and every allocation failing in turn. Each must return
 * an error whose message names the problem, never crash, and leave no allocation behind. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx.pb-c.h"
#include "testutil.h"

#define CONV_MODEL "/usr/share/libonnx-testdata/data/node/test_conv_with_strides_padding/model.onnx"

/* Allocations go through tu_counting_allocator (live blocks, the largest request, a failing Nth call). */

static void write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* Load from memory (base_dir may be NULL); expect failure, no model, no leak, and every needle in the message. */
static void expect_bad_mem(const char *label, const void *data, size_t n, const char *base_dir, const char *needle1,
                           const char *needle2) {
    otter_model *m = (otter_model *)1;
    otter_clear_error();
    long live = tu_alloc_live;
    otter_status s = otter_model_load_from_memory(&m, data, n, base_dir);
    const char *msg = otter_last_error();
    bool ok = s != OTTER_OK && m == NULL && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2)) &&
              tu_alloc_live == live;
    CHECK(ok);
    printf("  %-36s -> %s: %s%s\n", label, otter_status_name(s), msg, ok ? "" : "   <-- UNEXPECTED");
    if (s == OTTER_OK) otter_model_free(m);
    if (tu_alloc_live != live) printf("     %ld allocations leaked\n", tu_alloc_live - live);
}

static void expect_bad_file(const char *label, const char *path, const char *needle1, const char *needle2) {
    otter_model *m = (otter_model *)1;
    otter_clear_error();
    long live = tu_alloc_live;
    otter_status s = otter_model_load(&m, path);
    const char *msg = otter_last_error();
    bool ok = s != OTTER_OK && m == NULL && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2)) &&
              tu_alloc_live == live;
    CHECK(ok);
    printf("  %-36s -> %s: %s%s\n", label, otter_status_name(s), msg, ok ? "" : "   <-- UNEXPECTED");
    if (s == OTTER_OK) otter_model_free(m);
    if (tu_alloc_live != live) printf("     %ld allocations leaked\n", tu_alloc_live - live);
}

/* A small valid model: Y = Identity(W) with W an initializer described by `w`; optionally an If node whose
 * then-branch holds `w` as a Constant attribute instead. Packed into a malloc'd buffer. */
static uint8_t *build_model(Onnx__TensorProto *w, bool in_subgraph, size_t *size) {
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 13;

    Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
    tt.has_elem_type = 1;
    tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
    type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type.tensor_type = &tt;
    Onnx__ValueInfoProto y = ONNX__VALUE_INFO_PROTO__INIT, *outs[1] = {&y};
    y.name = "Y";
    y.type = &type;

    /* main graph: Identity(W) -> Y, or If(C) with then/else = Constant(value=w) -> Y */
    char *in_w[1] = {"W"}, *out_y[1] = {"Y"}, *in_c[1] = {"C"};
    Onnx__NodeProto node = ONNX__NODE_PROTO__INIT, *nodes[1] = {&node};
    node.op_type = "Identity";
    node.n_input = 1;
    node.input = in_w;
    node.n_output = 1;
    node.output = out_y;
    Onnx__TensorProto *inits[1] = {w};

    Onnx__NodeProto cnode = ONNX__NODE_PROTO__INIT, *cnodes[1] = {&cnode};
    Onnx__AttributeProto value = ONNX__ATTRIBUTE_PROTO__INIT, *cattrs[1] = {&value};
    Onnx__GraphProto branch = ONNX__GRAPH_PROTO__INIT;
    Onnx__AttributeProto then_a = ONNX__ATTRIBUTE_PROTO__INIT, else_a = ONNX__ATTRIBUTE_PROTO__INIT,
                         *ifattrs[2] = {&then_a, &else_a};
    Onnx__TypeProto__Tensor bt = ONNX__TYPE_PROTO__TENSOR__INIT;
    Onnx__TypeProto btype = ONNX__TYPE_PROTO__INIT;
    Onnx__ValueInfoProto c = ONNX__VALUE_INFO_PROTO__INIT, *ins[1] = {&c};
    char *branch_out[1] = {"Yb"};
    Onnx__ValueInfoProto yb = ONNX__VALUE_INFO_PROTO__INIT, *bouts[1] = {&yb};

    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    g.name = "bad";
    g.n_node = 1;
    g.node = nodes;
    g.n_output = 1;
    g.output = outs;
    if (!in_subgraph) {
        g.n_initializer = 1;
        g.initializer = inits;
    } else {
        cnode.op_type = "Constant";
        cnode.n_output = 1;
        cnode.output = branch_out;
        cnode.n_attribute = 1;
        cnode.attribute = cattrs;
        value.name = "value";
        value.has_type = 1;
        value.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        value.t = w;
        yb.name = "Yb";
        yb.type = &type;
        branch.name = "branch";
        branch.n_node = 1;
        branch.node = cnodes;
        branch.n_output = 1;
        branch.output = bouts;
        then_a.name = "then_branch";
        else_a.name = "else_branch";
        then_a.has_type = else_a.has_type = 1;
        then_a.type = else_a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
        then_a.g = else_a.g = &branch;
        node.op_type = "If";
        node.input = in_c;
        node.n_attribute = 2;
        node.attribute = ifattrs;
        bt.has_elem_type = 1;
        bt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
        btype.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
        btype.tensor_type = &bt;
        c.name = "C";
        c.type = &btype;
        g.n_input = 1;
        g.input = ins;
    }

    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = 8;
    model.producer_name = "test_bad_models";
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.graph = &g;
    *size = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = malloc(*size);
    onnx__model_proto__pack(&model, buf);
    return buf;
}

static float W_DATA[6] = {1, 2, 3, 4, 5, 6};
static int64_t W_DIMS[2] = {2, 3};

static void init_weight(Onnx__TensorProto *w, const char *name) {
    onnx__tensor_proto__init(w);
    w->name = (char *)name;
    w->n_dims = 2;
    w->dims = W_DIMS;
    w->has_data_type = 1;
    w->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    w->has_raw_data = 1;
    w->raw_data.data = (uint8_t *)W_DATA;
    w->raw_data.len = sizeof W_DATA;
}

static void test_built_models(void) {
    printf("models built with protobuf-c:\n");
    size_t n;
    uint8_t *buf;
    Onnx__TensorProto w;

    /* controls: the good models load */
    for (int sub = 0; sub < 2; sub++) {
        init_weight(&w, "W");
        buf = build_model(&w, sub, &n);
        otter_model *m = NULL;
        CHECK_OK(otter_model_load_from_memory(&m, buf, n, NULL));
        bool ok = m && m->graph && m->graph->n_nodes == 1 && (sub || m->graph->n_initializers == 1);
        CHECK(ok);
        printf("  %-36s -> %s\n", sub ? "control: If with Constant branch" : "control: Identity of an initializer",
               ok ? "loads" : otter_last_error());
        otter_model_free(m);
        free(buf);
    }

    for (int sub = 0; sub < 2; sub++) {
        const char *where = sub ? " (in an If branch)" : "";
        char label[128];
        init_weight(&w, "W_short");
        w.raw_data.len = 20;
        buf = build_model(&w, sub, &n);
        snprintf(label, sizeof label, "raw_data 20 bytes for 2x3%s", where);
        expect_bad_mem(label, buf, n, NULL, "W_short", "raw_data has 20 bytes");
        free(buf);

        int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 16};
        init_weight(&w, "W_huge");
        w.n_dims = 3;
        w.dims = huge;
        buf = build_model(&w, sub, &n);
        snprintf(label, sizeof label, "dims 2^40 x 2^40 x 16%s", where);
        expect_bad_mem(label, buf, n, NULL, "W_huge", "overflow");
        free(buf);

        int64_t max2[2] = {INT64_MAX, 2};
        init_weight(&w, "W_max");
        w.dims = max2;
        buf = build_model(&w, sub, &n);
        snprintf(label, sizeof label, "dims INT64_MAX x 2%s", where);
        expect_bad_mem(label, buf, n, NULL, "W_max", "overflow");
        free(buf);

        int64_t neg[2] = {2, -3};
        init_weight(&w, "W_neg");
        w.dims = neg;
        buf = build_model(&w, sub, &n);
        snprintf(label, sizeof label, "negative dim%s", where);
        expect_bad_mem(label, buf, n, NULL, "W_neg", "negative");
        free(buf);

        init_weight(&w, "W_type");
        w.data_type = 1234;
        buf = build_model(&w, sub, &n);
        snprintf(label, sizeof label, "data_type 1234%s", where);
        expect_bad_mem(label, buf, n, NULL, "W_type", "1234");
        free(buf);

        init_weight(&w, "W_typed");
        w.has_raw_data = 0;
        float five[5] = {1, 2, 3, 4, 5};
        w.n_float_data = 5;
        w.float_data = five;
        buf = build_model(&w, sub, &n);
        snprintf(label, sizeof label, "float_data 5 values for 2x3%s", where);
        expect_bad_mem(label, buf, n, NULL, "W_typed", "5");
        free(buf);
    }

    /* A few bytes must not make the loader allocate what the dims claim before it checks the data:
     * dims (2^26) float with 4 bytes of raw_data (or none) would otherwise cost 256 MB each. */
    int64_t big[1] = {INT64_C(1) << 26};
    for (int k = 0; k < 2; k++) {
        init_weight(&w, "W_claims_256MB");
        w.n_dims = 1;
        w.dims = big;
        w.raw_data.len = 4;
        w.has_raw_data = k == 0;
        buf = build_model(&w, false, &n);
        tu_alloc_biggest = 0;
        expect_bad_mem(k == 0 ? "dims 2^26 floats, raw_data 4 bytes" : "dims 2^26 floats, no data at all", buf, n, NULL,
                       "W_claims_256MB", NULL);
        bool bounded = tu_alloc_biggest <= ((size_t)1 << 20);
        CHECK(bounded);
        printf("     largest allocation while refusing this %zu-byte model: %zu bytes%s\n", n, tu_alloc_biggest,
               bounded ? "" : "   <-- allocates what the dims claim before checking the data");
        free(buf);
    }

    /* external data */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tu_tmp_path("bad_models"));
    mkdir(dir, 0755);
    char path[4300], side[4300];
    Onnx__StringStringEntryProto loc = ONNX__STRING_STRING_ENTRY_PROTO__INIT,
                                 off = ONNX__STRING_STRING_ENTRY_PROTO__INIT,
                                 len = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *ext[3] = {&loc, &off, &len};
    loc.key = "location";
    off.key = "offset";
    len.key = "length";
    off.value = "0";
    len.value = "24";
    const struct {
        const char *label, *location, *needle1, *needle2;
    } cases[] = {
        {"external file missing", "nope.bin", "W_ext", "nope.bin"},
        {"location '../x'", "../x", "W_ext", "escapes"},
        {"location 'a/../../x'", "a/../../x", "W_ext", "a/../../x"},
        {"location absolute '/etc/passwd'", "/etc/passwd", "W_ext", "/etc/passwd"},
        {"location empty", "", "W_ext", "location"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        init_weight(&w, "W_ext");
        w.has_raw_data = 0;
        w.n_external_data = 3;
        w.external_data = ext;
        w.has_data_location = 1;
        w.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        loc.value = (char *)cases[k].location;
        buf = build_model(&w, false, &n);
        snprintf(path, sizeof path, "%s/ext_%zu.onnx", dir, k);
        write_all(path, buf, n);
        expect_bad_file(cases[k].label, path, cases[k].needle1, cases[k].needle2);
        free(buf);
    }
    /* from memory with no folder */
    init_weight(&w, "W_ext");
    w.has_raw_data = 0;
    w.n_external_data = 3;
    w.external_data = ext;
    w.has_data_location = 1;
    w.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    loc.value = "w.bin";
    buf = build_model(&w, false, &n);
    expect_bad_mem("external data, from memory, no folder", buf, n, NULL, "W_ext", "external");
    /* side file present but too short for offset + length */
    snprintf(path, sizeof path, "%s/ext_short.onnx", dir);
    snprintf(side, sizeof side, "%s/w.bin", dir);
    write_all(path, buf, n);
    write_all(side, W_DATA, 16);
    expect_bad_file("external file 16 bytes, length 24", path, "W_ext", "w.bin");
    /* offset past the end */
    write_all(side, W_DATA, sizeof W_DATA);
    free(buf);
    off.value = "1000";
    buf = build_model(&w, false, &n);
    write_all(path, buf, n);
    expect_bad_file("external offset 1000 past the end", path, "W_ext", "1000");
    free(buf);
    off.value = "-8";
    buf = build_model(&w, false, &n);
    write_all(path, buf, n);
    expect_bad_file("external offset -8", path, "W_ext", "-8");
    free(buf);
    off.value = "0";
    len.value = "18446744073709551615";
    buf = build_model(&w, false, &n);
    write_all(path, buf, n);
    expect_bad_file("external length 2^64-1", path, "W_ext", "length");
    free(buf);
    /* control: everything right, it loads with the right values */
    len.value = "24";
    buf = build_model(&w, false, &n);
    write_all(path, buf, n);
    otter_model *m = NULL;
    CHECK_OK(otter_model_load(&m, path));
    bool ok = m && m->graph->n_initializers == 1 && m->graph->initializers[0]->data &&
              memcmp(m->graph->initializers[0]->data, W_DATA, sizeof W_DATA) == 0;
    CHECK(ok);
    printf("  %-36s -> %s\n", "control: external data present", ok ? "loads, values equal" : otter_last_error());
    otter_model_free(m);
    free(buf);
}

static void test_bytes(void) {
    printf("raw bytes:\n");
    write_all(tu_tmp_path("empty.onnx"), "", 0);
    char empty[4096];
    snprintf(empty, sizeof empty, "%s", tu_tmp_path("empty.onnx"));
    expect_bad_file("empty file", empty, "empty.onnx", "empty");
    expect_bad_mem("empty buffer", "", 0, NULL, "empty", NULL);
    expect_bad_file("file does not exist", "/nonexistent-otter/model.onnx", "/nonexistent-otter/model.onnx", NULL);
    expect_bad_mem("garbage 0xff x 16", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 16, NULL,
                   "not a valid ONNX model", NULL);
    expect_bad_mem("text", "this is not a model at all", 26, NULL, "not a valid ONNX model", NULL);
    expect_bad_mem("ir_version as bytes (wire type 2)", "\x0a\x02\x01\x02", 4, NULL, "not a valid ONNX model", NULL);
    expect_bad_mem("graph as varint (wire type 0)", "\x08\x08\x38\x01", 4, NULL, "not a valid ONNX model", NULL);
    expect_bad_mem("graph length past the end", "\x08\x08\x3a\x40\x0a\x01", 6, NULL, "not a valid ONNX model", NULL);
    expect_bad_mem("wire type 6", "\x0e\x00", 2, NULL, "not a valid ONNX model", NULL);

    /* Every prefix of a real model: none may crash or leak; count how many are refused. */
    size_t size = 0;
    uint8_t *model = tu_read_file(CONV_MODEL, &size);
    CHECK(model != NULL);
    if (!model) return;
    size_t refused = 0, leaks = 0, accepted = 0;
    for (size_t len = 0; len < size; len++) {
        uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any over-read */
        memcpy(copy, model, len);
        long live = tu_alloc_live;
        otter_model *m = NULL;
        otter_status s = otter_model_load_from_memory(&m, copy, len, NULL);
        if (s == OTTER_OK) {
            accepted++;
            otter_model_free(m);
        } else {
            refused += m == NULL && otter_last_error()[0] != '\0';
        }
        leaks += tu_alloc_live != live;
        free(copy);
    }
    /* A prefix that ends on a field boundary is a valid (smaller) ModelProto, so some load. */
    CHECK(leaks == 0 && refused + accepted == size && refused > size / 2);
    printf("  every prefix of test_conv_with_strides_padding (%zu lengths): %zu refused with a message, "
           "%zu are valid smaller protos, %zu leaked\n",
           size, refused, accepted, leaks);
    otter_model *m = NULL;
    CHECK_OK(otter_model_load_from_memory(&m, model, size, NULL));
    otter_model_free(m);

    /* An unknown field numbered 0 (over-long key 0x80 0x00) appended at the top level: protobuf-c accepts
     * it; otter must refuse it or save something it reads back (python3-onnx refuses it). */
    {
        uint8_t *f0 = malloc(size + 3);
        memcpy(f0, model, size);
        memcpy(f0 + size, "\x80\x00\x04", 3);
        m = NULL;
        otter_status s = otter_model_load_from_memory(&m, f0, size + 3, NULL);
        bool ok = s != OTTER_OK;
        char msg[1024];
        snprintf(msg, sizeof msg, "refused: %s", otter_last_error());
        if (s == OTTER_OK) {
            void *out = NULL;
            size_t on = 0;
            otter_model *m2 = NULL;
            ok = otter_model_save_to_memory(m, &out, &on) == OTTER_OK &&
                 otter_model_load_from_memory(&m2, out, on, NULL) == OTTER_OK;
            snprintf(msg, sizeof msg, "accepted; saved copy %s%s",
                     ok ? "reloads" : "is refused: ", ok ? "" : otter_last_error());
            otter_model_free(m2);
            otter_free(out);
            otter_model_free(m);
        }
        CHECK(ok);
        printf("  %-36s -> %s\n", "unknown field 0 (over-long key)", msg);
        free(f0);
    }

    /* Every single-byte corruption (x ^ 0xff) of the same model: no crash, no leak. */
    size_t flips_refused = 0, flips_leaked = 0;
    for (size_t i = 0; i < size; i++) {
        uint8_t *copy = malloc(size);
        memcpy(copy, model, size);
        copy[i] ^= 0xff;
        long live = tu_alloc_live;
        m = NULL;
        otter_status s = otter_model_load_from_memory(&m, copy, size, NULL);
        if (s == OTTER_OK)
            otter_model_free(m);
        else
            flips_refused++;
        flips_leaked += tu_alloc_live != live;
        free(copy);
    }
    CHECK(flips_leaked == 0);
    printf("  every byte of it flipped (%zu models): %zu refused, none crashed, %zu leaked\n", size, flips_refused,
           flips_leaked);

    /* Pseudo-random garbage. */
    uint32_t x = 12345;
    size_t garbage_ok = 0;
    for (int k = 0; k < 2000; k++) {
        uint8_t buf[256];
        size_t n = (size_t)(k % 256);
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            buf[i] = (uint8_t)(x >> 24);
        }
        long live = tu_alloc_live;
        m = NULL;
        if (otter_model_load_from_memory(&m, buf, n, NULL) == OTTER_OK) otter_model_free(m);
        garbage_ok += tu_alloc_live == live;
    }
    CHECK(garbage_ok == 2000);
    printf("  2000 random buffers: no crash, %zu without a leak\n", garbage_ok);

    /* Fail the Nth allocation for N = 1, 2, ... until the load succeeds: a clean NOMEM, no leak. */
    size_t n_fail = 0, clean = 0;
    for (long nth = 1; nth < 100000; nth++) {
        tu_alloc_fail_at(nth);
        long live = tu_alloc_live;
        m = NULL;
        otter_status s = otter_model_load_from_memory(&m, model, size, NULL);
        tu_alloc_fail_at(0);
        if (s == OTTER_OK) {
            otter_model_free(m);
            break;
        }
        n_fail++;
        clean += s == OTTER_ERR_NOMEM && m == NULL && tu_alloc_live == live;
        if (!(s == OTTER_ERR_NOMEM && tu_alloc_live == live))
            printf("     allocation %ld failing: %s (%s), %ld leaked\n", nth, otter_status_name(s), otter_last_error(),
                   tu_alloc_live - live);
    }
    CHECK(n_fail > 10 && clean == n_fail);
    printf("  failing allocation 1..%zu in turn: %zu clean out-of-memory errors without a leak\n", n_fail, clean);
    free(model);
}

/* A protobuf message built inside out: the bytes sit right-aligned in buf[0, CAP), from `start`. */
enum { NEST_CAP = 1 << 20 };
typedef struct nest {
    uint8_t *buf;
    size_t start;
} nest;

static void nest_prepend(nest *b, const uint8_t *bytes, size_t n) {
    if (b->start < n) abort(); /* the test's own sizes stay far below NEST_CAP */
    b->start -= n;
    memcpy(b->buf + b->start, bytes, n);
}
static void nest_varint(nest *b, uint64_t v) {
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    nest_prepend(b, tmp, n);
}
/* The whole buffer so far becomes field `field` (length-delimited) of a new outer message. */
static void nest_wrap(nest *b, unsigned field) {
    nest_varint(b, NEST_CAP - b->start);
    nest_varint(b, (uint64_t)field << 3 | 2);
}
static void nest_string(nest *b, unsigned field, const char *s) {
    nest_prepend(b, (const uint8_t *)s, strlen(s));
    nest_varint(b, strlen(s));
    nest_varint(b, (uint64_t)field << 3 | 2);
}
static void nest_int(nest *b, unsigned field, uint64_t v) {
    nest_varint(b, v);
    nest_varint(b, (uint64_t)field << 3);
}
/* ModelProto{ir_version 8, opset_import {"" 17}, graph: the buffer so far}. */
static void nest_model(nest *b) {
    nest_wrap(b, 7);
    size_t graph_start = b->start;
    nest_int(b, 2, 17); /* OperatorSetIdProto.version */
    nest_varint(b, graph_start - b->start);
    nest_varint(b, 8 << 3 | 2);
    nest_int(b, 1, 8);
}

/* A graph input of type sequence(sequence(...(tensor(float)))) `depth` deep. */
static size_t deep_sequence_model(nest *b, int depth) {
    b->start = NEST_CAP;
    nest_int(b, 1, 1); /* Tensor.elem_type = FLOAT */
    nest_wrap(b, 1);   /* TypeProto.tensor_type */
    for (int i = 0; i < depth; i++) {
        nest_wrap(b, 1); /* Sequence.elem_type */
        nest_wrap(b, 4); /* TypeProto.sequence_type */
    }
    nest_wrap(b, 2); /* ValueInfoProto.type */
    nest_string(b, 1, "x");
    nest_wrap(b, 11); /* GraphProto.input */
    nest_model(b);
    return NEST_CAP - b->start;
}

/* `depth` If nodes, each the then_branch of the one outside it. */
static size_t deep_if_model(nest *b, int depth) {
    b->start = NEST_CAP;
    for (int i = 0; i < depth; i++) {
        if (i) {
            nest_wrap(b, 6); /* AttributeProto.g */
            nest_int(b, 20, 5);
            nest_string(b, 1, "then_branch");
            nest_wrap(b, 5); /* NodeProto.attribute */
        }
        nest_string(b, 4, "If");
        nest_wrap(b, 1); /* GraphProto.node */
    }
    nest_model(b);
    return NEST_CAP - b->start;
}

static void test_deep_nesting(void) {
    nest b = {malloc(NEST_CAP), NEST_CAP};
    if (!b.buf) return;
    size_t n = deep_sequence_model(&b, 4393);
    expect_bad_mem("sequence type 4,393 deep", b.buf + b.start, n, NULL, "nested more than 100 deep", "onnx.TypeProto");
    n = deep_if_model(&b, 2929);
    expect_bad_mem("2,929 nested If subgraphs", b.buf + b.start, n, NULL, "nested more than 100 deep", NULL);
    /* Below the limit both load: 40 nested sequences are 84 levels, 30 nested Ifs 90. */
    otter_model *m = NULL;
    n = deep_sequence_model(&b, 40);
    CHECK_OK(otter_model_load_from_memory(&m, b.buf + b.start, n, NULL));
    otter_model_free(m);
    n = deep_if_model(&b, 30);
    CHECK_OK(otter_model_load_from_memory(&m, b.buf + b.start, n, NULL));
    otter_model_free(m);
    /* A SequenceProto value 5,000 deep, read as the sequence it declares. */
    b.start = NEST_CAP;
    for (int i = 0; i < 5000; i++) {
        nest_int(&b, 2, 3); /* elem_type = SEQUENCE */
        nest_wrap(&b, 5);   /* sequence_values */
    }
    otter_type tensor = {.kind = OTTER_TYPE_TENSOR, .has_elem_type = true, .elem_type = OTTER_DTYPE_FLOAT, .rank = -1};
    otter_type seq = {.kind = OTTER_TYPE_SEQUENCE, .elem = &tensor};
    otter_arg a;
    otter_clear_error();
    otter_status s = otter_arg_load_pb_from_memory(&a, b.buf + b.start, NEST_CAP - b.start, &seq);
    printf("  %-36s -> %s: %s\n", "SequenceProto 5,000 deep", otter_status_name(s), otter_last_error());
    CHECK(s == OTTER_ERR_INVALID && strstr(otter_last_error(), "nested more than 100 deep"));
    free(b.buf);
}

int main(void) {
    otter_set_allocator(&tu_counting_allocator);
    test_deep_nesting();
    test_bytes();
    test_built_models();
    otter_set_allocator(NULL);
    printf("live allocations at exit: %ld\n", tu_alloc_live);
    CHECK(tu_alloc_live == 0);
    return tu_finish("test_bad_models");
}
