/* IR 10-13 models: the fields Debian's onnx.proto (IR 8) lacks are read, written back and checked.
 *
 * A model is built field by field with the protobuf-c bindings (proto/onnx.proto): a node calling a
 * model-local function by overload, metadata_props on a value, a node, the graph and a tensor, node
 * device configurations, the model's device configurations, a function with overload, value_info and
 * metadata_props, and an unknown field. It goes through otter_model_load_from_memory and
 * otter_model_save_to_memory, and the copy is decoded again and compared field by field. Then the
 * checker: the model is valid; a wrong overload, a function defined twice, IR 14, a function body
 * reading an undefined name or using an operator newer than its opset import are refused naming the
 * node or rule; an opset newer than the schemas is accepted with a warning. A model made in memory is
 * written at the IR version its element types need. */
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "otter/check.h"
#include "otter/io.h"
#include "testutil.h"

static Onnx__StringStringEntryProto kv_a = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
static Onnx__StringStringEntryProto kv_b = ONNX__STRING_STRING_ENTRY_PROTO__INIT;

static void init_kvs(void) {
    kv_a.key = "origin";
    kv_a.value = "test_onnx_ir13";
    kv_b.key = "layer";
    kv_b.value = "7";
}

static Onnx__StringStringEntryProto *kvs[] = {&kv_a, &kv_b};

/* The body's operator and second input: Add(x, x) unless a case breaks it. */
static const char *body_op = "Add", *body_input = "x";

/* A FunctionProto "Double" in domain "local" with this overload: y = x + x. slot: 0 or 1 (static storage). */
static Onnx__FunctionProto *make_function(int slot, const char *overload) {
    static Onnx__FunctionProto f[2];
    static Onnx__NodeProto body[2];
    static Onnx__OperatorSetIdProto fop = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    static Onnx__OperatorSetIdProto *fops[] = {&fop};
    static char *in[] = {"x"}, *out[] = {"y"}, *add_in[] = {"x", "x"};
    add_in[1] = (char *)body_input;
    static Onnx__ValueInfoProto vi = ONNX__VALUE_INFO_PROTO__INIT;
    static Onnx__ValueInfoProto *vis[] = {&vi};
    static Onnx__NodeProto *node_lists[2][1];
    Onnx__FunctionProto *p = &f[slot];
    Onnx__NodeProto *n = &body[slot];
    onnx__function_proto__init(p);
    onnx__node_proto__init(n);
    fop.domain = "";
    fop.has_version = true;
    fop.version = 21;
    vi.name = "y";
    n->op_type = (char *)body_op;
    n->n_input = 2;
    n->input = add_in;
    n->n_output = 1;
    n->output = out;
    p->name = "Double";
    p->domain = "local";
    p->overload = (char *)overload;
    p->n_input = 1;
    p->input = in;
    p->n_output = 1;
    p->output = out;
    node_lists[slot][0] = n;
    p->n_node = 1;
    p->node = node_lists[slot];
    p->n_opset_import = 1;
    p->opset_import = fops;
    p->n_value_info = 1;
    p->value_info = vis;
    p->n_metadata_props = 2;
    p->metadata_props = kvs;
    return p;
}

/* The serialized test model. ir_version and the node's overload are parameters. */
static uint8_t *make_model(int64_t ir_version, int64_t opset, const char *overload, bool twice, size_t *size) {
    init_kvs();
    Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
    tt.has_elem_type = true;
    tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
    tt.shape = &shape;
    Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
    type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type.tensor_type = &tt;
    Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, y = ONNX__VALUE_INFO_PROTO__INIT;
    x.name = "x";
    x.type = &type;
    x.n_metadata_props = 1;
    x.metadata_props = kvs;
    y.name = "y";
    y.type = &type;
    Onnx__ValueInfoProto *ins[] = {&x}, *outs[] = {&y};

    /* y = Double(x) + w, w an initializer with metadata. */
    static char *call_in[] = {"x"}, *call_out[] = {"d"}, *add_in[] = {"d", "w"}, *add_out[] = {"y"};
    Onnx__NodeProto call = ONNX__NODE_PROTO__INIT, add = ONNX__NODE_PROTO__INIT;
    call.name = "call";
    call.op_type = "Double";
    call.domain = "local";
    call.overload = (char *)overload;
    call.n_input = 1;
    call.input = call_in;
    call.n_output = 1;
    call.output = call_out;
    call.n_metadata_props = 2;
    call.metadata_props = kvs;
    Onnx__SimpleShardedDimProto simple = ONNX__SIMPLE_SHARDED_DIM_PROTO__INIT;
    simple.dim_case = ONNX__SIMPLE_SHARDED_DIM_PROTO__DIM_DIM_PARAM;
    simple.dim_param = "batch";
    simple.has_num_shards = true;
    simple.num_shards = 2;
    Onnx__SimpleShardedDimProto *simples[] = {&simple};
    Onnx__ShardedDimProto dim = ONNX__SHARDED_DIM_PROTO__INIT;
    dim.has_axis = true;
    dim.axis = 0;
    dim.n_simple_sharding = 1;
    dim.simple_sharding = simples;
    Onnx__ShardedDimProto *dims[] = {&dim};
    int64_t devices[] = {0, 1};
    Onnx__ShardingSpecProto spec = ONNX__SHARDING_SPEC_PROTO__INIT;
    spec.tensor_name = "x";
    spec.n_device = 2;
    spec.device = devices;
    spec.n_sharded_dim = 1;
    spec.sharded_dim = dims;
    Onnx__ShardingSpecProto *specs[] = {&spec};
    Onnx__NodeDeviceConfigurationProto ndc = ONNX__NODE_DEVICE_CONFIGURATION_PROTO__INIT;
    ndc.configuration_id = "pair";
    ndc.n_sharding_spec = 1;
    ndc.sharding_spec = specs;
    ndc.has_pipeline_stage = true;
    ndc.pipeline_stage = 1;
    Onnx__NodeDeviceConfigurationProto *ndcs[] = {&ndc};
    call.n_device_configurations = 1;
    call.device_configurations = ndcs;
    /* An unknown field (number 99, varint 5) on the node: newer than IR 13. */
    uint8_t unknown_value = 5;
    ProtobufCMessageUnknownField unknown = {99, PROTOBUF_C_WIRE_TYPE_VARINT, 1, &unknown_value};
    call.base.n_unknown_fields = 1;
    call.base.unknown_fields = &unknown;
    add.name = "add";
    add.op_type = "Add";
    add.n_input = 2;
    add.input = add_in;
    add.n_output = 1;
    add.output = add_out;
    Onnx__NodeProto *nodes[] = {&call, &add};

    float w_value = 0.5f;
    Onnx__TensorProto w = ONNX__TENSOR_PROTO__INIT;
    w.name = "w";
    w.has_data_type = true;
    w.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    w.n_float_data = 1;
    w.float_data = &w_value;
    w.n_metadata_props = 1;
    w.metadata_props = kvs + 1;
    Onnx__TensorProto *inits[] = {&w};

    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    g.name = "ir13";
    g.n_node = 2;
    g.node = nodes;
    g.n_input = 1;
    g.input = ins;
    g.n_output = 1;
    g.output = outs;
    g.n_initializer = 1;
    g.initializer = inits;
    g.n_metadata_props = 2;
    g.metadata_props = kvs;

    Onnx__OperatorSetIdProto op_default = ONNX__OPERATOR_SET_ID_PROTO__INIT,
                             op_local = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    op_default.domain = "";
    op_default.has_version = true;
    op_default.version = opset;
    op_local.domain = "local";
    op_local.has_version = true;
    op_local.version = 1;
    Onnx__OperatorSetIdProto *opsets[] = {&op_default, &op_local};

    static char *device_names[] = {"cpu:0", "cpu:1"};
    Onnx__DeviceConfigurationProto dc = ONNX__DEVICE_CONFIGURATION_PROTO__INIT;
    dc.name = "pair";
    dc.has_num_devices = true;
    dc.num_devices = 2;
    dc.n_device = 2;
    dc.device = device_names;
    Onnx__DeviceConfigurationProto *dcs[] = {&dc};

    Onnx__FunctionProto *functions[] = {make_function(0, "v2"), make_function(1, "v2")};
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = true;
    m.ir_version = ir_version;
    m.producer_name = "test_onnx_ir13";
    m.n_opset_import = 2;
    m.opset_import = opsets;
    m.graph = &g;
    m.n_functions = twice ? 2 : 1;
    m.functions = functions;
    m.n_configuration = 1;
    m.configuration = dcs;
    *size = onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = malloc(*size);
    onnx__model_proto__pack(&m, buf);
    return buf;
}

static bool kv_equal(Onnx__StringStringEntryProto *const *got, size_t n, Onnx__StringStringEntryProto *const *want,
                     size_t n_want) {
    if (n != n_want) return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(got[i]->key, want[i]->key) != 0 || strcmp(got[i]->value, want[i]->value) != 0) return false;
    return true;
}

static void check_round_trip(void) {
    size_t size;
    uint8_t *bytes = make_model(13, 21, "v2", false, &size);
    otter_model *m = NULL;
    CHECK_OK(otter_model_load_from_memory(&m, bytes, size, NULL));
    if (!m) return;
    CHECK(m->ir_version == 13 && m->graph->n_nodes == 2);
    CHECK(m->graph->nodes[0]->overload && strcmp(m->graph->nodes[0]->overload, "v2") == 0);
    CHECK(m->graph->nodes[1]->overload == NULL);
    /* The clone keeps what the load kept. */
    otter_model *copy = NULL;
    CHECK_OK(otter_model_clone(&copy, m));
    void *saved = NULL;
    size_t saved_size = 0;
    CHECK_OK(otter_model_save_to_memory(copy, &saved, &saved_size));
    otter_model_free(copy);
    otter_model_free(m);
    Onnx__ModelProto *p = onnx__model_proto__unpack(NULL, saved_size, saved);
    CHECK(p != NULL);
    if (!p) return;
    printf("round trip: %zu bytes in, %zu bytes out\n", size, saved_size);
    CHECK(p->ir_version == 13 && p->n_configuration == 1);
    CHECK(p->n_configuration == 1 && strcmp(p->configuration[0]->name, "pair") == 0 &&
          p->configuration[0]->num_devices == 2 && p->configuration[0]->n_device == 2 &&
          strcmp(p->configuration[0]->device[1], "cpu:1") == 0);
    CHECK(p->n_functions == 1);
    Onnx__FunctionProto *f = p->functions[0];
    CHECK(strcmp(f->name, "Double") == 0 && strcmp(f->domain, "local") == 0 && f->overload &&
          strcmp(f->overload, "v2") == 0 && f->n_value_info == 1 &&
          kv_equal(f->metadata_props, f->n_metadata_props, kvs, 2));
    Onnx__GraphProto *g = p->graph;
    CHECK(kv_equal(g->metadata_props, g->n_metadata_props, kvs, 2));
    CHECK(g->n_input == 1 && kv_equal(g->input[0]->metadata_props, g->input[0]->n_metadata_props, kvs, 1));
    CHECK(g->n_initializer == 1 &&
          kv_equal(g->initializer[0]->metadata_props, g->initializer[0]->n_metadata_props, kvs + 1, 1));
    Onnx__NodeProto *call = g->node[0];
    CHECK(call->overload && strcmp(call->overload, "v2") == 0);
    CHECK(kv_equal(call->metadata_props, call->n_metadata_props, kvs, 2));
    CHECK(call->n_device_configurations == 1);
    if (call->n_device_configurations == 1) {
        Onnx__NodeDeviceConfigurationProto *d = call->device_configurations[0];
        CHECK(strcmp(d->configuration_id, "pair") == 0 && d->pipeline_stage == 1 && d->n_sharding_spec == 1);
        Onnx__ShardingSpecProto *s = d->sharding_spec[0];
        CHECK(strcmp(s->tensor_name, "x") == 0 && s->n_device == 2 && s->device[1] == 1 && s->n_sharded_dim == 1 &&
              s->sharded_dim[0]->n_simple_sharding == 1 &&
              strcmp(s->sharded_dim[0]->simple_sharding[0]->dim_param, "batch") == 0 &&
              s->sharded_dim[0]->simple_sharding[0]->num_shards == 2);
    }
    CHECK(call->base.n_unknown_fields == 1 && call->base.unknown_fields[0].tag == 99 &&
          call->base.unknown_fields[0].len == 1 && call->base.unknown_fields[0].data[0] == 5);
    onnx__model_proto__free_unpacked(p, NULL);
    free(bytes);
    free(saved);
}

static int warnings;
static void count_warning(otter_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != OTTER_LOG_WARN) return;
    printf("  warning: %s\n", msg);
    warnings++;
}

/* Checks the model; want_ok, or the first problem contains `want`. */
static void check_case(const char *what, int64_t ir_version, int64_t opset, const char *overload, bool twice,
                       const char *want) {
    size_t size;
    uint8_t *bytes = make_model(ir_version, opset, overload, twice, &size);
    otter_model *m = NULL;
    CHECK_OK(otter_model_load_from_memory(&m, bytes, size, NULL));
    free(bytes);
    if (!m) return;
    otter_check_report *r = NULL;
    CHECK_OK(otter_check_report_create(&r));
    otter_check_options o = {.report = r};
    otter_status s = otter_model_check(m, &o);
    const char *msg = otter_check_report_message(r, 0);
    printf("%-44s -> %s\n", what, msg ? msg : "valid");
    if (want == NULL) {
        CHECK(s == OTTER_OK && otter_check_report_count(r) == 0);
    } else {
        CHECK(s == OTTER_ERR_INVALID && msg && strstr(msg, want) != NULL);
    }
    otter_check_report_free(r);
    otter_model_free(m);
}

/* IR version of a model made in memory (IR 8) after one tensor of `dtype` is added and it is saved. */
static int64_t saved_ir_with(otter_dtype dtype, bool as_input) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 21));
    const int64_t dims[1] = {2};
    if (as_input) {
        CHECK_OK(otter_graph_add_input(m->graph, "x", dtype, 1, dims, NULL));
    } else {
        otter_tensor *t = NULL;
        CHECK_OK(otter_tensor_create(&t, "w", dtype, 1, dims));
        CHECK_OK(otter_graph_add_initializer(m->graph, t));
    }
    void *data = NULL;
    size_t size = 0;
    CHECK_OK(otter_model_save_to_memory(m, &data, &size));
    otter_model_free(m);
    Onnx__ModelProto *p = onnx__model_proto__unpack(NULL, size, data);
    free(data);
    int64_t ir = p ? p->ir_version : -1;
    onnx__model_proto__free_unpacked(p, NULL);
    return ir;
}

/* Newer element types raise the written IR version to the one that introduced them, no further. */
static void check_ir_follows_types(void) {
    CHECK(saved_ir_with(OTTER_DTYPE_FLOAT, false) == 8);
    CHECK(saved_ir_with(OTTER_DTYPE_BFLOAT16, true) == 8);
    CHECK(saved_ir_with(OTTER_DTYPE_FLOAT8E5M2, false) == 9);
    CHECK(saved_ir_with(OTTER_DTYPE_INT4, true) == 10);
    CHECK(saved_ir_with(OTTER_DTYPE_FLOAT4E2M1, false) == 11);
    CHECK(saved_ir_with(OTTER_DTYPE_FLOAT8E8M0, true) == 12);
    CHECK(saved_ir_with(OTTER_DTYPE_UINT2, false) == 13);
}

int main(void) {
    check_round_trip();
    check_ir_follows_types();
    for (int64_t ir = 10; ir <= 13; ir++) {
        char what[64];
        snprintf(what, sizeof what, "IR %lld, overload v2 defined", (long long)ir);
        check_case(what, ir, 21, "v2", false, NULL);
    }
    check_case("IR 13 at opset 28", 13, 28, "v2", false, NULL);
    /* Newer than the schemas: checked against opset 28's, as onnx does with a warning. */
    otter_set_log_callback(count_warning, NULL);
    check_case("IR 13 at opset 30", 13, 30, "v2", false, NULL);
    otter_set_log_callback(NULL, NULL);
    CHECK(warnings == 1);
    check_case("overload v3 not defined", 13, 21, "v3", false,
               "node 'call' (Double): calls model-local function Double (domain 'local', overload 'v3')");
    /* (local, Double, "") is no function, and onnx does not check custom domains' nodes. */
    check_case("custom domain without overload", 13, 21, NULL, false, NULL);
    check_case("function defined twice", 13, 21, "v2", true,
               "model-local function 'Double' (domain 'local', overload 'v2') is defined more than once");
    check_case("IR 14", 14, 21, "v2", false, "model ir_version 14 is newer than otter knows (IR 13");
    /* Function bodies are checked against the function's own opset imports (ai.onnx 21). */
    body_input = "z";
    check_case("function body reads an undefined name", 13, 21, "v2", false,
               "model-local function 'Double' (domain 'local'): node #0 (Add): input 'z' is not defined");
    body_input = "x";
    body_op = "Attention"; /* since opset 23 */
    check_case("function body: operator newer than its opset", 13, 23, "v2", false,
               "model-local function 'Double' (domain 'local'): node #0 (Attention): no operator Attention in domain "
               "ai.onnx at opset 21");
    body_op = "Add";
    return tu_finish("test_onnx_ir13");
}
