/* otter run MODEL [NAME=FILE ...]: run a model on tensors from .npy / .pb files. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "otter/runtime.h"

#define MAX_POS 1024

static const char *o_outdir, *o_threads, *o_repeat, *o_opt, *o_max_memory;
static bool o_pb, o_quiet, o_profile;

static const cli_opt OPTS[] = {
    {"--outdir", "-o", "DIR",
     "write output i to DIR/output_<i>.npy (graph-output order); a value .npy can't hold (a sequence, an "
     "optional without a value, strings, bfloat16, ...) goes to DIR/output_<i>.pb instead, with a note",
     &o_outdir, NULL},
    {"--pb", NULL, NULL,
     "also write every output as DIR/output_<i>.pb (TensorProto, or onnx-data.proto's SequenceProto / "
     "OptionalProto as the graph declares the output)",
     NULL, &o_pb},
    {"--threads", "-t", "N", "threads for the kernels (default: available cores)", &o_threads, NULL},
    {"--repeat", "-r", "N", "run N times and print latency (min / median / p90) and peak memory", &o_repeat, NULL},
    {"--opt-level", NULL, "N",
     "graph optimizations: 0 none, 1 drop Identity/Dropout and fold constants, 2 (default) also fuse and use "
     "Winograd F(2x2,3x3) convolutions (as exact as direct), 3 Winograd F(4x4,3x3) (faster, rounding error up to "
     "~1e-4)",
     &o_opt, NULL},
    {"--max-memory", NULL, "BYTES",
     "fail cleanly, naming the node, when the run's values would need more than BYTES (K/M/G suffixes; default: "
     "the machine's physical memory)",
     &o_max_memory, NULL},
    {"--profile", NULL, NULL,
     "print where the time went: per operator type and the slowest nodes (with --repeat, of the runs after the first "
     "two, which plan memory and touch it; with --repeat 2, of the second)",
     NULL, &o_profile},
    {"--quiet", "-q", NULL, "don't print the outputs' summary", NULL, &o_quiet},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};

static const cli_spec SPEC = {
    "run",
    "MODEL [NAME=FILE | FILE ...]",
    "Run MODEL on the CPU. Inputs are .npy or .pb files chosen by extension, bound by name (NAME=FILE,\n"
    "an initializer that is also a graph input included) or, without a name, in the order of the graph's\n"
    "inputs (initializers excluded). A .pb holds what the graph declares the input to be: a TensorProto,\n"
    "a SequenceProto (seq) or an OptionalProto (optional), as in ONNX's backend tests.\n"
    "Prints each output's name, type, shape and first values; --outdir writes them as files.",
    1,
    MAX_POS,
    OPTS,
};

static bool parse_int(const char *s, long lo, long hi, long *out) {
    if (!s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static void print_shape(const otter_tensor *t) {
    printf("[");
    for (int i = 0; i < t->rank; i++) printf("%s%lld", i ? ", " : "", (long long)t->dims[i]);
    printf("]");
}

static void print_summary(const char *name, const otter_tensor *t) {
    printf("%s: %s ", name, otter_dtype_name(t->dtype));
    print_shape(t);
    int64_t n = otter_tensor_numel(t), show = n < 8 ? n : 8;
    if (show > 0) printf(" =");
    for (int64_t i = 0; i < show; i++) {
        switch (t->dtype) {
        case OTTER_DTYPE_FLOAT:
            printf(" %.6g", ((const float *)t->data)[i]);
            break;
        case OTTER_DTYPE_DOUBLE:
            printf(" %.6g", ((const double *)t->data)[i]);
            break;
        case OTTER_DTYPE_INT64:
            printf(" %lld", (long long)((const int64_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_INT32:
            printf(" %d", ((const int32_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_INT8:
            printf(" %d", ((const int8_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_UINT8:
            printf(" %u", ((const uint8_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_BOOL:
            printf(" %s", ((const uint8_t *)t->data)[i] ? "true" : "false");
            break;
        case OTTER_DTYPE_STRING: {
            const otter_bytes *b = &((const otter_bytes *)t->data)[i];
            printf(" \"%.*s\"", (int)(b->len < 40 ? b->len : 40), b->data ? b->data : "");
            break;
        }
        case OTTER_DTYPE_COMPLEX64:
        case OTTER_DTYPE_COMPLEX128:
            printf(" ?");
            break;
        default: /* float16, bfloat16, the float8 / float4 formats, the other integers */
            printf(" %.6g", otter_tensor_value(t, i));
            break;
        }
    }
    printf("%s\n", n > show ? " ..." : "");
}

static void print_arg_summary(const char *name, const otter_arg *a) {
    if (a->kind == OTTER_ARG_TENSOR) {
        print_summary(name, a->tensor);
    } else if (a->kind == OTTER_ARG_SEQUENCE) {
        size_t n = otter_sequence_length(a->sequence), show = n < 4 ? n : 4;
        printf("%s: sequence of %zu %s tensors%s", name, n, otter_dtype_name(otter_sequence_elem_type(a->sequence)),
               n ? ":" : "");
        for (size_t i = 0; i < show; i++) {
            printf(i ? ", " : " ");
            print_shape(otter_sequence_at(a->sequence, i));
        }
        printf("%s\n", n > show ? ", ..." : "");
    } else {
        printf("%s: optional without a value\n", name);
    }
}

/* DIR/output_<i>.npy, or, for a value .npy can't hold, a note and no file (a stale one from an earlier run is
 * removed); *npy_written says which. */
static int write_npy(const char *dir, size_t i, const char *name, const otter_arg *a, bool *npy_written) {
    char path[4096];
    snprintf(path, sizeof path, "%s/output_%zu.npy", dir, i);
    *npy_written = false;
    const char *what = a->kind == OTTER_ARG_SEQUENCE ? "a sequence"
                       : a->kind == OTTER_ARG_NONE   ? "an optional without a value"
                                                     : NULL;
    char buf[128];
    if (!what) {
        otter_status st = otter_tensor_save_npy(a->tensor, path);
        *npy_written = st == OTTER_OK;
        if (st != OTTER_ERR_UNSUPPORTED) return st == OTTER_OK ? CLI_EXIT_OK : cli_fail("run", NULL);
        snprintf(buf, sizeof buf, "a %s tensor", otter_dtype_name(a->tensor->dtype));
        what = buf;
    }
    remove(path);
    fprintf(stderr, "otter run: output %zu '%s' is %s, which .npy cannot hold: written as %s/output_%zu.pb\n", i, name,
            what, dir, i);
    return CLI_EXIT_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The profile so far (NULL on out of memory); *n its node count. */
static otter_node_profile *profile_snapshot(const otter_session *s, size_t *n) {
    *n = otter_session_profile(s, NULL, 0);
    otter_node_profile *p = calloc(*n + 1, sizeof *p);
    if (p) otter_session_profile(s, p, *n);
    return p;
}

int cmd_run(int argc, char **argv) {
    o_outdir = o_threads = o_repeat = o_opt = o_max_memory = NULL;
    o_pb = o_quiet = o_profile = false;
    const char *pos[MAX_POS];
    size_t n_pos = 0;
    int rc = cli_parse(&SPEC, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    long threads = 0, repeat = 0, opt = 2;
    if (o_threads && !parse_int(o_threads, 1, 1024, &threads))
        return cli_usage_error(&SPEC, "--threads needs a number from 1 to 1024, not '%s'", o_threads);
    if (o_repeat && !parse_int(o_repeat, 1, 100000000, &repeat))
        return cli_usage_error(&SPEC, "--repeat needs a positive number, not '%s'", o_repeat);
    if (o_opt && !parse_int(o_opt, 0, 3, &opt))
        return cli_usage_error(&SPEC, "--opt-level is 0, 1, 2 or 3, not '%s'", o_opt);
    if (o_pb && !o_outdir) return cli_usage_error(&SPEC, "--pb needs --outdir");
    size_t max_memory = 0;
    if (o_max_memory && (!cli_parse_size(o_max_memory, &max_memory) || max_memory == 0))
        return cli_usage_error(&SPEC, "--max-memory needs a size such as 512M or 2G, not '%s'", o_max_memory);

    otter_session_options so = {.n_threads = (int)threads,
                                .opt_level = (int)opt,
                                .opt_level_set = true,
                                .profile = o_profile,
                                .max_memory_bytes = max_memory};
    otter_session *s = NULL;
    /* the library's errors name the model file */
    if (otter_session_create_from_file(&s, pos[0], &so) != OTTER_OK) return cli_fail("run", NULL);
    const otter_graph *graph = otter_session_model(s)->graph;

    size_t n_in = n_pos - 1, n_out = otter_session_output_count(s);
    otter_arg *in = calloc(n_in + 1, sizeof *in), *out = calloc(n_out + 1, sizeof *out);
    const char **names = calloc(n_in + 1, sizeof *names);
    bool named = false, positional = false;
    rc = CLI_EXIT_OK;
    if (!in || !out || !names) {
        fprintf(stderr, "otter run: out of memory\n");
        rc = CLI_EXIT_INVALID;
    }
    for (size_t i = 0; i < n_in && rc == CLI_EXIT_OK; i++) {
        const char *arg = pos[i + 1], *eq = strchr(arg, '=');
        const char *file = arg;
        /* NAME=FILE, unless the whole argument is an existing file (a path may contain '=') */
        struct stat st;
        if (eq && stat(arg, &st) != 0) {
            names[i] = strndup(arg, (size_t)(eq - arg));
            file = eq + 1;
            named = true;
        } else {
            positional = true;
            if (i >= otter_session_input_count(s)) {
                rc =
                    cli_usage_error(&SPEC, "%zu inputs given, the model takes %zu", n_in, otter_session_input_count(s));
                break;
            }
            names[i] = strdup(otter_session_input_name(s, i));
        }
        if (!names[i]) {
            fprintf(stderr, "otter run: out of memory\n");
            rc = CLI_EXIT_INVALID;
            break;
        }
        /* the declared type says which message a .pb holds; an unknown name is the run's error to report */
        if (otter_arg_load(&in[i], file, otter_graph_value_type(graph, names[i])) != OTTER_OK) {
            char context[512];
            snprintf(context, sizeof context, "input '%s'", names[i]);
            rc = cli_fail("run", context);
        }
    }
    if (rc == CLI_EXIT_OK && named && positional)
        rc = cli_usage_error(&SPEC, "give every input as NAME=FILE, or none (positional)");

    double *ms = NULL;
    long runs = repeat > 0 ? repeat : 1;
    if (rc == CLI_EXIT_OK && !(ms = calloc((size_t)runs, sizeof *ms))) {
        fprintf(stderr, "otter run: out of memory\n");
        rc = CLI_EXIT_INVALID;
    }
    /* runs the profile leaves out: the first plans memory, the second touches the new arena's pages
     * (a training graph: 8 s, then 2.3 s, then 0.77 s a run) */
    const long warmup = runs > 2 ? 2 : runs - 1;
    otter_node_profile *first_profile = NULL;
    size_t n_first = 0;
    for (long r = 0; r < runs && rc == CLI_EXIT_OK; r++) {
        /* a later run fills the tensors and sequences of the one before in place; "no value" starts over */
        for (size_t i = 0; i < n_out; i++)
            if (out[i].kind == OTTER_ARG_NONE) otter_arg_free(&out[i]);
        double t0 = now_ms();
        if (otter_session_run_args(s, n_in, names, in, n_out, NULL, out) != OTTER_OK) rc = cli_fail("run", pos[0]);
        ms[r] = now_ms() - t0;
        if (r == warmup - 1 && o_profile && !(first_profile = profile_snapshot(s, &n_first))) {
            fprintf(stderr, "otter run: out of memory\n");
            rc = CLI_EXIT_INVALID;
        }
    }
    if (rc == CLI_EXIT_OK && !o_quiet)
        for (size_t i = 0; i < n_out; i++) print_arg_summary(otter_session_output_name(s, i), &out[i]);
    if (rc == CLI_EXIT_OK && o_outdir) {
        mkdir(o_outdir, 0755);
        for (size_t i = 0; i < n_out && rc == CLI_EXIT_OK; i++) {
            bool npy_written;
            rc = write_npy(o_outdir, i, otter_session_output_name(s, i), &out[i], &npy_written);
            if (rc != CLI_EXIT_OK || (npy_written && !o_pb)) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/output_%zu.pb", o_outdir, i);
            if (otter_arg_save_pb(&out[i], otter_session_output_type(s, i), path) != OTTER_OK)
                rc = cli_fail("run", NULL);
        }
    }
    if (rc == CLI_EXIT_OK && repeat > 0) {
        double first = ms[0];
        /* latency of the steady state: the first run also plans memory */
        size_t k = runs > 1 ? (size_t)runs - 1 : 1;
        double *steady = runs > 1 ? ms + 1 : ms;
        qsort(steady, k, sizeof *steady, cmp_double);
        otter_memory_stats st;
        otter_session_memory_stats(s, &st);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("latency over %zu runs (%d threads): min %.3f ms, median %.3f ms, p90 %.3f ms; first run %.3f ms\n", k,
               otter_session_threads(s), steady[0], steady[k / 2], steady[(k * 9) / 10 < k ? (k * 9) / 10 : k - 1],
               first);
        printf("memory: arena %.1f KiB planned peak for %zu intermediates (%.1f KiB without reuse, %zu in place; "
               "%.1f KiB on the heap in the first run), folded constants %.1f KiB, process peak RSS %.1f MiB\n",
               (double)st.arena_bytes / 1024, st.n_planned, (double)st.naive_bytes / 1024, st.n_inplace,
               (double)st.heap_peak_bytes / 1024, (double)st.constant_bytes / 1024, (double)ru.ru_maxrss / 1024);
    }
    if (rc == CLI_EXIT_OK && o_profile) {
        size_t n;
        otter_node_profile *p = profile_snapshot(s, &n);
        rc = cli_print_profile("run", p, n, first_profile, n_first, runs - warmup, "run");
        free(p);
    }
    free(first_profile);
    free(ms);
    for (size_t i = 0; i < n_in; i++) {
        otter_arg_free(&in[i]);
        free((void *)names[i]);
    }
    for (size_t i = 0; i < n_out; i++) otter_arg_free(&out[i]);
    free(in);
    free(out);
    free(names);
    otter_session_free(s);
    return rc;
}
