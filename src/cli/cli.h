/* Shared helpers for the `otter` verbs: option parsing from a table, --help text, loading and
 * saving models with error messages, comma lists. Exit status: 0 success, 1 invalid input,
 * 2 usage error. */
#ifndef OTTER_CLI_H
#define OTTER_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/otter.h"

enum { CLI_EXIT_OK = 0, CLI_EXIT_INVALID = 1, CLI_EXIT_USAGE = 2, CLI_CONTINUE = -1 };

/* One option of a verb: a flag (metavar NULL, sets *flag) or an option with a value (sets *value;
 * given twice, the last wins). */
typedef struct cli_opt {
    const char *name;    /* "--output" */
    const char *alias;   /* "-o" or NULL */
    const char *metavar; /* "FILE"; NULL for a flag */
    const char *help;
    const char **value;
    bool *flag;
} cli_opt;

typedef struct cli_spec {
    const char *verb;        /* "merge" */
    const char *args;        /* positional synopsis, "A.onnx B.onnx" */
    const char *description; /* what the verb does (may span lines) */
    size_t min_pos, max_pos; /* number of positional arguments allowed */
    const cli_opt *opts;     /* terminated by an entry with name NULL */
} cli_spec;

/* Parse argv (argv[0] is the verb). Positional arguments go to pos (room for spec->max_pos).
 * Returns CLI_CONTINUE when the verb should run, CLI_EXIT_OK after printing --help,
 * CLI_EXIT_USAGE after printing a usage error. */
int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, size_t *n_pos);
/* Print "otter VERB: message" and a pointer to --help; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_spec *spec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "otter VERB: context: <otter_last_error()>" for a failed call; returns CLI_EXIT_INVALID. */
int cli_fail(const char *verb, const char *context);

/* Load a model; on failure prints the error and returns false. */
bool cli_load(const char *verb, const char *path, otter_model **m);
/* Save a model (opts may be NULL); on failure prints the error and returns false. */
bool cli_save(const char *verb, const otter_model *m, const char *path, const otter_save_options *opts);
/* For verbs that edit a graph (clean, extract, merge): check the result first, and write nothing
 * when it is invalid (the first problem printed). */
bool cli_save_edited(const char *verb, const otter_model *m, const char *path);

/* Split "a,b,c" into a NULL-terminated array of strings (free with cli_list_free); empty
 * items are dropped. Returns NULL when out of memory. */
char **cli_split(const char *s, size_t *n);
void cli_list_free(char **list);
/* --normalize: "none", "scale" (x/255) or "standard" (per-channel mean/std); false when unknown. */
bool cli_parse_norm(const char *text, otter_data_norm *out);
/* A byte count: digits with an optional K, M or G suffix (powers of 1024). */
bool cli_parse_size(const char *s, size_t *out);

/* --profile (otter run, otter train): p (n nodes in execution order, as otter_session_profile gives them;
 * sorted here) less first (the same nodes after the warm-up runs; NULL: none), per run of `runs`: each
 * operator type's time and share, then the ten slowest nodes. unit names a run ("run", "step"). A NULL p
 * (a snapshot out of memory) is reported; returns CLI_EXIT_OK or CLI_EXIT_INVALID. */
int cli_print_profile(const char *verb, otter_node_profile *p, size_t n, const otter_node_profile *first,
                      size_t n_first, long runs, const char *unit);

/* The verbs (one file each, src/cli/cmd_<verb>.c). argv[0] is the verb name. */
int cmd_info(int argc, char **argv);
int cmd_print(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_clean(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_extract(int argc, char **argv);
int cmd_dot(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_run(int argc, char **argv);        /* src/cli/cmd_run.c, by the runtime */
int cmd_checkpoint(int argc, char **argv); /* src/cli/cmd_checkpoint.c: ORT training checkpoints */
int cmd_artifacts(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_train(int argc, char **argv);     /* src/cli/cmd_train.c: train ORT-format artifacts on a dataset */
int cmd_eval(int argc, char **argv);      /* src/cli/cmd_eval.c */
int cmd_export(int argc, char **argv);    /* src/cli/cmd_export.c */
int cmd_params(int argc, char **argv);    /* src/cli/cmd_params.c */
int cmd_fl(int argc, char **argv);        /* src/cli/cmd_fl.c: dispatches simulate, serve, client */
int cmd_fl_serve(int argc, char **argv);  /* src/cli/cmd_fl_serve.c */
int cmd_fl_client(int argc, char **argv); /* src/cli/cmd_fl_client.c */
int cmd_ops(int argc, char **argv);       /* src/cli/cmd_ops.c: the operator registry */

/* A decimal integer >= lo. */
bool cli_parse_int(const char *text, long long lo, long long *out);
/* A finite number >= lo (-INFINITY: any). */
bool cli_parse_double(const char *text, double lo, double *out);

/* Points collected for a plot (otter/plot.h). */
typedef struct cli_curve {
    double *x, *y;
    size_t n, cap;
} cli_curve;
/* Append a point; false when out of memory (the curve is unchanged). */
bool cli_curve_add(cli_curve *c, double x, double y);
void cli_curve_free(cli_curve *c);
/* The federated round plot of `fl simulate` and `fl serve` (src/cli/cmd_fl.c): train loss and eval
 * accuracy (right axis) per round; prints "plot: PATH", or the error naming the verb. */
bool cli_fl_plot(const char *verb, const char *path, const cli_curve *loss, const cli_curve *acc);
/* FL tokens from a file, one a line (blank lines and # comments skipped): a NULL-terminated list (free with
 * cli_list_free), or NULL after printing why (unreadable, no token, a line longer than CLI_FL_TOKEN_MAX
 * characters named by file and line). */
#define CLI_FL_TOKEN_MAX 1024
char **cli_fl_read_tokens(const char *verb, const char *path, size_t *n);
/* The tokens of --token T / a token FILE (read as above) / $OTTER_FL_TOKEN, first given first: a token
 * need not sit on the command line, where ps shows it. NULL after printing why. */
char **cli_fl_token_option(const char *verb, const char *token, const char *token_file, size_t *n);

#endif
