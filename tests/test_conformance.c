/* ONNX backend conformance: every test case under /usr/share/libonnx-testdata/data/{node,
 * pytorch-converted, pytorch-operator, simple} run through otter's session.
 *
 * For each case folder: load model.onnx, create a session, and for every test_data_set_*: bind
 * input_<i>.pb positionally to the graph inputs that are not initializers, run, and compare every
 * output with output_<i>.pb (dtype, shape, then values: exact for integers, bools and strings;
 * for floating types |got - expected| <= atol + rtol * |expected| with rtol 1e-3, atol 1e-7, NaN
 * matching NaN, infinities matching exactly). Per-case tolerance overrides, each with a reason,
 * are in tests/conformance/tolerances.txt. Each case runs in a child process (fork) with a time
 * limit, so a crash or a hang in one kernel is reported as that case's failure.
 *
 * Inputs and outputs declared seq(tensor) or optional(...) are read from onnx's SequenceProto /
 * OptionalProto files (decoded here: the protobuf-c bindings come from onnx.proto, which lacks
 * them; the tensors inside go through otter_tensor_load_pb_from_memory), run through
 * otter_session_run_args and compared element by element (kinds and lengths exactly). Cases with
 * map inputs or outputs are skipped.
 *
 * Usage: test_conformance [--write-expected] [--list FILE] [--timeout SEC] [-v] [FILTER ...]
 *   default: compare with tests/conformance/expected_pass.txt (one case per line, `# case: reason`
 *            for known failures); fail on a regression (listed case fails) and on an unexpected
 *            pass (then update the list with --write-expected, which keeps existing reasons).
 *   FILTER:  run only cases whose "folder/name" contains one of these substrings (no list check).
 *   OTTER_CONFORMANCE_WRITE=1 in the environment acts as --write-expected. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "otter/io.h"
#include "otter/runtime.h"
#include "testutil.h"

#define DATA_ROOT "/usr/share/libonnx-testdata/data"
static const char *FOLDERS[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
#define N_FOLDERS (sizeof FOLDERS / sizeof FOLDERS[0])

enum { R_PASS = 'P', R_FAIL = 'F', R_SKIP = 'S' };

/* Present when built with -fsanitize=address (OTTER_SANITIZE): check each case for leaks. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

typedef struct result {
    char *name; /* folder/case */
    int folder;
    char kind;
    char *msg;
} result;

/* ---- tolerance overrides ---- */

typedef struct tol {
    char name[256];
    double rtol, atol;
} tol;
static tol *g_tols;
static size_t g_n_tols;

static void load_tolerances(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        tol t;
        if (sscanf(line, "%255s %lf %lf", t.name, &t.rtol, &t.atol) == 3) {
            g_tols = realloc(g_tols, (g_n_tols + 1) * sizeof *g_tols);
            g_tols[g_n_tols++] = t;
        }
    }
    fclose(f);
}

/* ---- element access ---- */

static double half_to_double(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(m + 1024, e - 25);
    return s ? -v : v;
}
static double bf16_to_double(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double elem_f(const otter_tensor *t, int64_t i) {
    switch (t->dtype) {
    case OTTER_DTYPE_FLOAT:
        return ((const float *)t->data)[i];
    case OTTER_DTYPE_DOUBLE:
        return ((const double *)t->data)[i];
    case OTTER_DTYPE_FLOAT16:
        return half_to_double(((const uint16_t *)t->data)[i]);
    case OTTER_DTYPE_BFLOAT16:
        return bf16_to_double(((const uint16_t *)t->data)[i]);
    case OTTER_DTYPE_COMPLEX64:
        return ((const float *)t->data)[i];
    case OTTER_DTYPE_COMPLEX128:
        return ((const double *)t->data)[i];
    default:
        return 0;
    }
}

static void elem_str(const otter_tensor *t, int64_t i, char *buf, size_t cap) {
    switch (t->dtype) {
    case OTTER_DTYPE_UINT8:
        snprintf(buf, cap, "%u", ((const uint8_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_INT8:
        snprintf(buf, cap, "%d", ((const int8_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_UINT16:
        snprintf(buf, cap, "%u", ((const uint16_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_INT16:
        snprintf(buf, cap, "%d", ((const int16_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_INT32:
        snprintf(buf, cap, "%d", ((const int32_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_INT64:
        snprintf(buf, cap, "%lld", (long long)((const int64_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_UINT32:
        snprintf(buf, cap, "%u", ((const uint32_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_UINT64:
        snprintf(buf, cap, "%llu", (unsigned long long)((const uint64_t *)t->data)[i]);
        break;
    case OTTER_DTYPE_BOOL:
        snprintf(buf, cap, "%s", ((const uint8_t *)t->data)[i] ? "true" : "false");
        break;
    case OTTER_DTYPE_STRING: {
        const otter_bytes *b = &((const otter_bytes *)t->data)[i];
        snprintf(buf, cap, "\"%.*s\"", (int)(b->len < 60 ? b->len : 60), b->data ? b->data : "");
        break;
    }
    default:
        snprintf(buf, cap, "%.9g", elem_f(t, i));
    }
}

static void shape_str(const otter_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)t->dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Compare; on mismatch write a description to msg and return false. worst gets the largest
 * |got - expected| / (atol + rtol |expected|) seen. */
static bool compare(const otter_tensor *got, const otter_tensor *exp, double rtol, double atol, char *msg, size_t cap,
                    double *worst) {
    char a[128], b[128];
    if (got->dtype != exp->dtype) {
        snprintf(msg, cap, "element type %s, expected %s", otter_dtype_name(got->dtype), otter_dtype_name(exp->dtype));
        return false;
    }
    bool same_shape = got->rank == exp->rank;
    for (int i = 0; same_shape && i < got->rank; i++) same_shape = got->dims[i] == exp->dims[i];
    if (!same_shape) {
        shape_str(got, a, sizeof a);
        shape_str(exp, b, sizeof b);
        snprintf(msg, cap, "shape %s, expected %s", a, b);
        return false;
    }
    int64_t n = otter_tensor_numel(exp);
    bool is_f =
        otter_dtype_is_float(exp->dtype) || exp->dtype == OTTER_DTYPE_COMPLEX64 || exp->dtype == OTTER_DTYPE_COMPLEX128;
    if (exp->dtype == OTTER_DTYPE_COMPLEX64 || exp->dtype == OTTER_DTYPE_COMPLEX128) n *= 2;
    for (int64_t i = 0; i < n; i++) {
        bool ok;
        if (is_f) {
            double g = elem_f(got, i), e = elem_f(exp, i);
            if (isnan(e) || isnan(g))
                ok = isnan(e) && isnan(g);
            else if (isinf(e) || isinf(g))
                ok = g == e;
            else {
                double lim = atol + rtol * fabs(e), d = fabs(g - e);
                ok = d <= lim;
                if (lim > 0 && d / lim > *worst) *worst = d / lim;
            }
        } else if (exp->dtype == OTTER_DTYPE_STRING) {
            const otter_bytes *x = &((const otter_bytes *)got->data)[i], *y = &((const otter_bytes *)exp->data)[i];
            ok = x->len == y->len && (x->len == 0 || memcmp(x->data, y->data, x->len) == 0);
        } else {
            size_t es = otter_dtype_size(exp->dtype);
            ok = memcmp((const char *)got->data + i * es, (const char *)exp->data + i * es, es) == 0;
        }
        if (!ok) {
            elem_str(got, i, a, sizeof a);
            elem_str(exp, i, b, sizeof b);
            int64_t bad = 0;
            for (int64_t j = i; j < n; j++) {
                if (is_f) {
                    double g = elem_f(got, j), e = elem_f(exp, j);
                    bool okj = (isnan(e) || isnan(g))   ? (isnan(e) && isnan(g))
                               : (isinf(e) || isinf(g)) ? g == e
                                                        : fabs(g - e) <= atol + rtol * fabs(e);
                    bad += !okj;
                } else {
                    bad++; /* not counted exactly for non-floats */
                    break;
                }
            }
            snprintf(msg, cap, "first mismatch at index %lld: got %s, expected %s (%s%lld of %lld differ)",
                     (long long)i, a, b, is_f ? "" : ">=", (long long)bad, (long long)n);
            return false;
        }
    }
    return true;
}

/* ---- sequences and optionals ---- */

/* onnx-data.proto: SequenceProto {1 name, 2 elem_type, 3 tensor_values, 4 sparse_tensor_values,
 * 5 sequence_values, 6 map_values, 7 optional_values}; OptionalProto {1 name, 2 elem_type,
 * 3 tensor_value, 4 sparse_tensor_value, 5 sequence_value, 6 map_value, 7 optional_value};
 * elem_type: 0 undefined, 1 tensor, 2 sparse tensor, 3 sequence, 4 map, 5 optional. */
static bool pb_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int sh = 0; *p < end && sh < 64; sh += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Fields of a message: calls fn(field, wire type, payload, len, varint) for each; false when malformed. */
typedef bool (*pb_field_fn)(void *ctx, unsigned field, const unsigned char *data, size_t len, uint64_t v, int wt);
static bool pb_walk(const unsigned char *p, size_t n, pb_field_fn fn, void *ctx) {
    const unsigned char *end = p + n;
    while (p < end) {
        uint64_t key, v = 0;
        if (!pb_varint(&p, end, &key)) return false;
        int wt = (int)(key & 7);
        const unsigned char *data = NULL;
        size_t len = 0;
        if (wt == 0) {
            if (!pb_varint(&p, end, &v)) return false;
        } else if (wt == 2) {
            if (!pb_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
            data = p;
            len = (size_t)v;
            p += len;
        } else if (wt == 1 || wt == 5) {
            size_t w = wt == 1 ? 8 : 4;
            if ((size_t)(end - p) < w) return false;
            p += w;
        } else {
            return false;
        }
        if (!fn(ctx, (unsigned)(key >> 3), data, len, v, wt)) return false;
    }
    return true;
}

typedef struct pb_read {
    otter_arg *out;
    bool optional;
    int64_t elem_type;
    bool have_value;
    char err[256];
} pb_read;

static bool read_message(const unsigned char *p, size_t n, bool optional, otter_arg *out, char *err, size_t cap);

static bool on_field(void *vctx, unsigned field, const unsigned char *data, size_t len, uint64_t v, int wt) {
    pb_read *r = vctx;
    if (field == 2 && wt == 0) {
        r->elem_type = (int64_t)v;
        return true;
    }
    if (wt != 2 || field < 3 || field > 7) return true; /* name, unknown */
    if (field != 3 && field != 5) {
        snprintf(r->err, sizeof r->err, "field %u (sparse tensors, maps, nested optionals) is not supported", field);
        return false;
    }
    if (r->optional) {
        r->have_value = true;
        if (field == 3) {
            otter_tensor *t = NULL;
            if (otter_tensor_load_pb_from_memory(&t, data, len) != OTTER_OK) {
                snprintf(r->err, sizeof r->err, "optional's tensor: %s", otter_last_error());
                return false;
            }
            *r->out = otter_arg_of_tensor(t);
            return true;
        }
        return read_message(data, len, false, r->out, r->err, sizeof r->err);
    }
    if (field == 5) {
        snprintf(r->err, sizeof r->err, "sequences of sequences are not supported");
        return false;
    }
    otter_tensor *t = NULL;
    if (otter_tensor_load_pb_from_memory(&t, data, len) != OTTER_OK ||
        otter_sequence_append(r->out->sequence, t) != OTTER_OK) {
        snprintf(r->err, sizeof r->err, "sequence element %zu: %s", otter_sequence_length(r->out->sequence),
                 otter_last_error());
        otter_tensor_free(t);
        return false;
    }
    return true;
}

/* A SequenceProto (optional false) or an OptionalProto into *out. */
static bool read_message(const unsigned char *p, size_t n, bool optional, otter_arg *out, char *err, size_t cap) {
    pb_read r = {out, optional, 0, false, ""};
    if (!optional) {
        otter_sequence *q = NULL;
        if (otter_sequence_create(&q, OTTER_DTYPE_UNDEFINED) != OTTER_OK) {
            snprintf(err, cap, "%s", otter_last_error());
            return false;
        }
        *out = otter_arg_of_sequence(q);
    }
    if (!pb_walk(p, n, on_field, &r)) {
        snprintf(err, cap, "%s", r.err[0] ? r.err : "malformed protobuf");
        otter_arg_free(out);
        return false;
    }
    if (optional && !r.have_value) *out = otter_arg_none();
    return true;
}

/* The value in path: a TensorProto, or a SequenceProto / OptionalProto when ty declares one. */
static bool load_value(const char *path, const otter_type *ty, otter_arg *out, char *err, size_t cap) {
    *out = (otter_arg){0};
    if (!ty || (ty->kind != OTTER_TYPE_SEQUENCE && ty->kind != OTTER_TYPE_OPTIONAL)) {
        otter_tensor *t = NULL;
        if (otter_tensor_load_pb(&t, path) != OTTER_OK) {
            snprintf(err, cap, "%s", otter_last_error());
            return false;
        }
        *out = otter_arg_of_tensor(t);
        return true;
    }
    size_t n;
    unsigned char *buf = tu_read_file(path, &n);
    if (!buf) {
        snprintf(err, cap, "cannot open");
        return false;
    }
    bool ok = read_message(buf, n, ty->kind == OTTER_TYPE_OPTIONAL, out, err, cap);
    free(buf);
    return ok;
}

static const char *kind_str(otter_arg_kind k) {
    return k == OTTER_ARG_TENSOR     ? "a tensor"
           : k == OTTER_ARG_SEQUENCE ? "a sequence"
           : k == OTTER_ARG_NONE     ? "none"
                                     : "unset";
}

static bool compare(const otter_tensor *got, const otter_tensor *exp, double rtol, double atol, char *msg, size_t cap,
                    double *worst);

/* Kinds, sequence lengths, then every tensor. */
static bool compare_arg(const otter_arg *got, const otter_arg *exp, double rtol, double atol, char *msg, size_t cap,
                        double *worst) {
    if (got->kind != exp->kind) {
        snprintf(msg, cap, "got %s, expected %s", kind_str(got->kind), kind_str(exp->kind));
        return false;
    }
    if (exp->kind == OTTER_ARG_TENSOR) return compare(got->tensor, exp->tensor, rtol, atol, msg, cap, worst);
    if (exp->kind != OTTER_ARG_SEQUENCE) return true;
    size_t n = otter_sequence_length(exp->sequence);
    if (otter_sequence_length(got->sequence) != n) {
        snprintf(msg, cap, "sequence of %zu tensors, expected %zu", otter_sequence_length(got->sequence), n);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char m[768];
        if (!compare(otter_sequence_at(got->sequence, i), otter_sequence_at(exp->sequence, i), rtol, atol, m, sizeof m,
                     worst)) {
            snprintf(msg, cap, "sequence element %zu: %s", i, m);
            return false;
        }
    }
    return true;
}

/* ---- one case, in the child ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names in dir starting with prefix (malloc'd array of malloc'd strings). */
static size_t list_dir(const char *dir, const char *prefix, char ***out) {
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        *out = realloc(*out, (n + 1) * sizeof **out);
        (*out)[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(*out, n, sizeof **out, cmp_str);
    return n;
}

static void free_list(char **l, size_t n) {
    for (size_t i = 0; i < n; i++) free(l[i]);
    free(l);
}

/* Index of input_<i>.pb / output_<i>.pb (the names sort as strings, so parse the number). */
static int file_index(const char *name) {
    const char *u = strchr(name, '_');
    return u ? atoi(u + 1) : -1;
}

/* Maps (and sparse tensors) are what the harness cannot feed or compare. */
static bool unsupported_value(const otter_type *t) {
    if (!t) return false;
    if (t->kind == OTTER_TYPE_MAP || t->kind == OTTER_TYPE_SPARSE_TENSOR) return true;
    if (t->kind == OTTER_TYPE_SEQUENCE || t->kind == OTTER_TYPE_OPTIONAL) return unsupported_value(t->elem);
    return false;
}
static bool non_tensor(const otter_value *v) { return v->has_type && unsupported_value(&v->type); }

static char run_case(const char *dir, const char *name, char *msg, size_t cap) {
    char path[8192];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    otter_model *m = NULL;
    if (otter_model_load(&m, path) != OTTER_OK) {
        snprintf(msg, cap, "load: %s", otter_last_error());
        return R_FAIL;
    }
    for (size_t i = 0; i < m->graph->n_inputs; i++)
        if (non_tensor(&m->graph->inputs[i])) {
            snprintf(msg, cap, "input '%s' is a map or sparse tensor", m->graph->inputs[i].name);
            otter_model_free(m);
            return R_SKIP;
        }
    for (size_t i = 0; i < m->graph->n_outputs; i++)
        if (non_tensor(&m->graph->outputs[i])) {
            snprintf(msg, cap, "output '%s' is a map or sparse tensor", m->graph->outputs[i].name);
            otter_model_free(m);
            return R_SKIP;
        }
    double rtol = 1e-3, atol = 1e-7;
    for (size_t i = 0; i < g_n_tols; i++)
        if (strcmp(g_tols[i].name, name) == 0) {
            rtol = g_tols[i].rtol;
            atol = g_tols[i].atol;
        }
    otter_session *s = NULL;
    if (otter_session_create(&s, m, NULL) != OTTER_OK) {
        snprintf(msg, cap, "create: %s", otter_last_error());
        otter_model_free(m);
        return R_FAIL;
    }
    char **sets = NULL;
    size_t n_sets = list_dir(dir, "test_data_set_", &sets);
    char result = R_PASS;
    double worst = 0;
    size_t n_outputs_checked = 0;
    if (n_sets == 0) {
        snprintf(msg, cap, "no test_data_set_*");
        result = R_FAIL;
    }
    for (size_t k = 0; k < n_sets && result == R_PASS; k++) {
        char sd[4096];
        snprintf(sd, sizeof sd, "%s/%s", dir, sets[k]);
        char **ins = NULL, **outs = NULL;
        size_t n_in = list_dir(sd, "input_", &ins), n_out = list_dir(sd, "output_", &outs);
        otter_arg *in = calloc(n_in + 1, sizeof *in), *exp = calloc(n_out + 1, sizeof *exp),
                  *got = calloc(n_out + 1, sizeof *got);
        for (size_t i = 0; i < n_in && result == R_PASS; i++) {
            snprintf(path, sizeof path, "%s/%s", sd, ins[i]);
            int idx = file_index(ins[i]);
            char m2[512];
            if (idx < 0 || (size_t)idx >= n_in) {
                snprintf(msg, cap, "%s: unexpected file name", path);
                result = R_FAIL;
            } else if (!load_value(path, otter_session_input_type(s, (size_t)idx), &in[idx], m2, sizeof m2)) {
                snprintf(msg, cap, "%s/%s: %s", sets[k], ins[i], m2);
                result = R_FAIL;
            }
        }
        for (size_t i = 0; i < n_out && result == R_PASS; i++) {
            snprintf(path, sizeof path, "%s/%s", sd, outs[i]);
            int idx = file_index(outs[i]);
            char m2[512];
            if (idx < 0 || (size_t)idx >= n_out) {
                snprintf(msg, cap, "%s: unexpected file name", path);
                result = R_FAIL;
            } else if (!load_value(path, otter_session_output_type(s, (size_t)idx), &exp[idx], m2, sizeof m2)) {
                snprintf(msg, cap, "%s/%s: %s", sets[k], outs[i], m2);
                result = R_FAIL;
            }
        }
        /* ONNX stores bfloat16 test data as uint16 tensors holding the bfloat16 bits (numpy has no
         * bfloat16): read them as the bfloat16 the graph declares. */
        for (size_t i = 0; i < n_in && result == R_PASS; i++) {
            const otter_type *ty = otter_session_input_type(s, i);
            otter_tensor *t = in[i].tensor;
            if (t && ty && ty->elem_type == OTTER_DTYPE_BFLOAT16 && t->dtype == OTTER_DTYPE_UINT16)
                t->dtype = OTTER_DTYPE_BFLOAT16;
        }
        for (size_t i = 0; i < n_out && result == R_PASS; i++) {
            const otter_type *ty = otter_session_output_type(s, i);
            otter_tensor *t = exp[i].tensor;
            if (t && ty && ty->elem_type == OTTER_DTYPE_BFLOAT16 && t->dtype == OTTER_DTYPE_UINT16)
                t->dtype = OTTER_DTYPE_BFLOAT16;
        }
        if (result == R_PASS && n_out > otter_session_output_count(s)) {
            snprintf(msg, cap, "%zu expected outputs, the graph has %zu", n_out, otter_session_output_count(s));
            result = R_FAIL;
        }
        /* Twice: the first run records sizes on the heap, the second runs from the arena plan
         * (outputs filled in place into the first run's tensors and sequences). */
        for (int pass = 0; pass < 2 && result == R_PASS; pass++) {
            if (otter_session_run_args(s, n_in, NULL, in, n_out, NULL, got) != OTTER_OK) {
                snprintf(msg, cap, "%s: run%s: %s", sets[k], pass ? " (planned)" : "", otter_last_error());
                result = R_FAIL;
            }
            for (size_t i = 0; i < n_out && result == R_PASS; i++) {
                char m2[1024];
                if (!compare_arg(&got[i], &exp[i], rtol, atol, m2, sizeof m2, &worst)) {
                    snprintf(msg, cap, "%s output %zu ('%s')%s: %s", sets[k], i, otter_session_output_name(s, i),
                             pass ? " in the planned run" : "", m2);
                    result = R_FAIL;
                }
                n_outputs_checked++;
            }
        }
        for (size_t i = 0; i < n_in; i++) otter_arg_free(&in[i]);
        for (size_t i = 0; i < n_out; i++) {
            otter_arg_free(&exp[i]);
            otter_arg_free(&got[i]);
        }
        free(in);
        free(exp);
        free(got);
        free_list(ins, n_in);
        free_list(outs, n_out);
    }
    if (result == R_PASS)
        snprintf(msg, cap, "%zu data sets, %zu outputs, worst error %.3g of tolerance", n_sets, n_outputs_checked,
                 worst);
    free_list(sets, n_sets);
    otter_session_free(s);
    otter_model_free(m);
    return result;
}

/* Fork, run the case in the child with a time limit, read its one-line verdict from a pipe. */
static void run_isolated(const char *dir, const char *name, int timeout, result *r) {
    int fd[2];
    if (pipe(fd) != 0) {
        r->kind = R_FAIL;
        r->msg = strdup("pipe failed");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        alarm((unsigned)timeout);
        char msg[2048];
        msg[0] = run_case(dir, name, msg + 1, sizeof msg - 1);
        /* under LeakSanitizer, everything the case allocated must be freed by now */
        if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check() && msg[0] != R_SKIP) {
            msg[0] = R_FAIL;
            snprintf(msg + 1, sizeof msg - 1, "memory leak (LeakSanitizer report on stderr)");
        }
        size_t len = strlen(msg), off = 0;
        while (off < len) {
            ssize_t w = write(fd[1], msg + off, len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd[1]);
        _exit(0);
    }
    close(fd[1]);
    char buf[2048];
    size_t n = 0;
    for (;;) {
        ssize_t rd = read(fd[0], buf + n, sizeof buf - 1 - n);
        if (rd > 0) {
            n += (size_t)rd;
            if (n == sizeof buf - 1) break;
        } else if (rd < 0 && errno == EINTR) {
            continue;
        } else {
            break;
        }
    }
    buf[n] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        char m[256];
        if (sig == SIGALRM)
            snprintf(m, sizeof m, "timed out after %d s", timeout);
        else
            snprintf(m, sizeof m, "crashed: signal %d (%s)", sig, strsignal(sig));
        r->kind = R_FAIL;
        r->msg = strdup(m);
    } else if (n == 0) {
        r->kind = R_FAIL;
        r->msg = strdup("child exited without a verdict");
    } else {
        r->kind = buf[0];
        r->msg = strdup(buf + 1);
    }
}

/* ---- the expected-pass list ---- */

typedef struct listed {
    char *name;
    bool pass;    /* a plain line */
    char *reason; /* a "# name: reason" line */
} listed;

static listed *g_list;
static size_t g_n_list;

static listed *find_listed(const char *name) {
    for (size_t i = 0; i < g_n_list; i++)
        if (strcmp(g_list[i].name, name) == 0) return &g_list[i];
    return NULL;
}

static bool load_list(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *p = line;
        bool comment = false;
        if (*p == '#') {
            comment = true;
            p++;
            while (*p == ' ') p++;
        }
        char *colon = comment ? strstr(p, ": ") : NULL;
        if (comment && (!colon || !strchr(p, '/') || strchr(p, '/') > colon)) continue; /* free comment */
        if (!*p) continue;
        g_list = realloc(g_list, (g_n_list + 1) * sizeof *g_list);
        listed *l = &g_list[g_n_list++];
        if (comment) {
            l->name = strndup(p, (size_t)(colon - p));
            l->reason = strdup(colon + 2);
            l->pass = false;
        } else {
            p[strcspn(p, " \t")] = '\0';
            l->name = strdup(p);
            l->reason = NULL;
            l->pass = true;
        }
    }
    fclose(f);
    return true;
}

/* Reasons written by a person (not the generated "FAIL: ..." text) survive a rewrite. */
#define AUTO_PREFIX "fails: "

static int write_list(const char *path, result *rs, size_t n) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", tmp);
        return 1;
    }
    fprintf(f, "# ONNX backend test cases otter passes (tests/test_conformance.c). One case per line;\n"
               "# a commented line '# case: reason' is a known failure. Regenerate with\n"
               "#   build/tests/test_conformance --write-expected\n"
               "# which keeps hand-written reasons (those not starting with '" AUTO_PREFIX "').\n");
    for (size_t f_i = 0; f_i < N_FOLDERS; f_i++) {
        fprintf(f, "\n# ---- %s ----\n", FOLDERS[f_i]);
        for (size_t i = 0; i < n; i++) {
            if (rs[i].folder != (int)f_i) continue;
            if (rs[i].kind == R_PASS) {
                fprintf(f, "%s\n", rs[i].name);
                continue;
            }
            listed *l = find_listed(rs[i].name);
            const char *why = rs[i].msg;
            char one[300];
            snprintf(one, sizeof one, "%s", why);
            one[strcspn(one, "\n")] = '\0';
            if (l && l->reason && strncmp(l->reason, AUTO_PREFIX, strlen(AUTO_PREFIX)) != 0 &&
                strncmp(l->reason, "skipped: ", 9) != 0)
                fprintf(f, "# %s: %s\n", rs[i].name, l->reason);
            else
                fprintf(f, "# %s: %s%s\n", rs[i].name, rs[i].kind == R_SKIP ? "skipped: " : AUTO_PREFIX, one);
        }
    }
    fclose(f);
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "cannot rename %s\n", tmp);
        return 1;
    }
    return 0;
}

/* The run's own allocations, kept in globals so that LeakSanitizer in a forked child (which
 * inherits them) sees them as reachable: its per-case check then reports only the case's leaks. */
result *g_rs; /* external linkage: not optimized away */
const char **g_filters;
char **g_cases;

int main(int argc, char **argv) {
    bool write = getenv("OTTER_CONFORMANCE_WRITE") && atoi(getenv("OTTER_CONFORMANCE_WRITE"));
    bool verbose = false;
    int timeout = 60;
    const char *list_path = tu_src_path("tests/conformance/expected_pass.txt");
    char list_buf[4096];
    snprintf(list_buf, sizeof list_buf, "%s", list_path);
    list_path = list_buf;
    const char **filters = calloc((size_t)argc + 1, sizeof *filters);
    g_filters = filters;
    size_t n_filters = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--write-expected") == 0)
            write = true;
        else if (strcmp(argv[i], "-v") == 0)
            verbose = true;
        else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
            timeout = atoi(argv[++i]);
        else if (strcmp(argv[i], "--list") == 0 && i + 1 < argc)
            list_path = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--write-expected] [--list FILE] [--timeout SEC] [-v] [FILTER ...]\n", argv[0]);
            return 2;
        } else
            filters[n_filters++] = argv[i];
    }
    char tol_path[4096];
    snprintf(tol_path, sizeof tol_path, "%s", tu_src_path("tests/conformance/tolerances.txt"));
    load_tolerances(tol_path);
    bool have_list = load_list(list_path);
    if (!have_list && !write) {
        fprintf(stderr, "no expected-pass list at %s (create it with --write-expected)\n", list_path);
        return 1;
    }

    result *rs = NULL;
    size_t n = 0;
    int counts[N_FOLDERS][3] = {{0}};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t fi = 0; fi < N_FOLDERS; fi++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", DATA_ROOT, FOLDERS[fi]);
        char **cases = NULL;
        size_t nc = list_dir(dir, "", &cases);
        g_cases = cases;
        for (size_t c = 0; c < nc; c++) {
            if (cases[c][0] == '.') continue;
            char cd[4400], name[512], model[4500];
            snprintf(cd, sizeof cd, "%s/%s", dir, cases[c]);
            snprintf(model, sizeof model, "%s/model.onnx", cd);
            struct stat st;
            if (stat(model, &st) != 0) continue;
            snprintf(name, sizeof name, "%s/%s", FOLDERS[fi], cases[c]);
            bool take = n_filters == 0;
            for (size_t k = 0; k < n_filters && !take; k++) take = strstr(name, filters[k]) != NULL;
            if (!take) continue;
            rs = realloc(rs, (n + 1) * sizeof *rs);
            g_rs = rs;
            result *r = &rs[n++];
            r->name = strdup(name);
            r->folder = (int)fi;
            run_isolated(cd, name, timeout, r);
            counts[fi][r->kind == R_PASS ? 0 : r->kind == R_FAIL ? 1 : 2]++;
            if (verbose)
                printf("%s %s: %s\n", r->kind == R_PASS ? "PASS" : r->kind == R_FAIL ? "FAIL" : "SKIP", name, r->msg);
        }
        free_list(cases, nc);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);

    printf("\nFailures:\n");
    for (size_t i = 0; i < n; i++)
        if (rs[i].kind == R_FAIL) printf("  FAIL %s: %s\n", rs[i].name, rs[i].msg);
    printf("\nconformance (rtol 1e-3, atol 1e-7, %zu tolerance overrides), %.1f s:\n", g_n_tols,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    int tot[3] = {0};
    for (size_t fi = 0; fi < N_FOLDERS; fi++) {
        int all = counts[fi][0] + counts[fi][1] + counts[fi][2];
        if (!all) continue;
        printf("  %-18s passed %4d  failed %4d  skipped %4d  of %4d  (%.1f%% pass)\n", FOLDERS[fi], counts[fi][0],
               counts[fi][1], counts[fi][2], all, 100.0 * counts[fi][0] / all);
        for (int k = 0; k < 3; k++) tot[k] += counts[fi][k];
    }
    printf("  %-18s passed %4d  failed %4d  skipped %4d  of %4d\n", "total", tot[0], tot[1], tot[2],
           tot[0] + tot[1] + tot[2]);

    if (write) {
        if (n_filters) {
            fprintf(stderr, "--write-expected needs the full run (no FILTER)\n");
            return 2;
        }
        int rc = write_list(list_path, rs, n);
        if (!rc) printf("wrote %s\n", list_path);
        return rc;
    }
    /* compare with the list */
    int regressions = 0, unexpected = 0;
    for (size_t i = 0; i < n; i++) {
        listed *l = find_listed(rs[i].name);
        bool expected_pass = l && l->pass;
        if (expected_pass && rs[i].kind != R_PASS) {
            printf("REGRESSION %s (listed as passing): %s\n", rs[i].name, rs[i].msg);
            regressions++;
        } else if (!expected_pass && rs[i].kind == R_PASS) {
            printf("UNEXPECTED PASS %s (%s)\n", rs[i].name, l ? "listed as a known failure" : "not listed");
            unexpected++;
        }
    }
    if (n_filters == 0)
        for (size_t i = 0; i < g_n_list; i++) {
            bool seen = false;
            for (size_t j = 0; j < n && !seen; j++) seen = strcmp(rs[j].name, g_list[i].name) == 0;
            if (!seen && g_list[i].pass) {
                printf("MISSING %s: listed as passing but no such case\n", g_list[i].name);
                regressions++;
            }
        }
    printf("\nagainst %s: %d regressions, %d unexpected passes\n", list_path, regressions, unexpected);
    if (unexpected)
        printf("cases pass that the list does not expect: update it with\n  %s --write-expected\n", argv[0]);
    for (size_t i = 0; i < n; i++) {
        free(rs[i].name);
        free(rs[i].msg);
    }
    for (size_t i = 0; i < g_n_list; i++) {
        free(g_list[i].name);
        free(g_list[i].reason);
    }
    free(rs);
    free(g_list);
    free(g_tols);
    free(filters);
    return regressions || unexpected ? 1 : 0;
}
