/* Shared helpers for the `otter` verbs (see cli.h). */
#include "cli.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "otter/check.h"

static void print_help(const cli_spec *spec) {
    printf("usage: otter %s [options] %s\n\n%s\n", spec->verb, spec->args, spec->description);
    printf("\noptions:\n");
    for (const cli_opt *o = spec->opts; o && o->name; o++) {
        char left[96];
        snprintf(left, sizeof left, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->name,
                 o->metavar ? " " : "", o->metavar ? o->metavar : "");
        printf("  %-30s %s\n", left, o->help);
    }
    printf("  %-30s %s\n", "-h, --help", "show this help and exit");
}

int cli_usage_error(const cli_spec *spec, const char *fmt, ...) {
    fprintf(stderr, "otter %s: ", spec->verb);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: otter %s [options] %s (see 'otter %s --help')\n", spec->verb, spec->args, spec->verb);
    return CLI_EXIT_USAGE;
}

int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, size_t *n_pos) {
    *n_pos = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (!only_pos && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            print_help(spec);
            return CLI_EXIT_OK;
        }
        if (!only_pos && a[0] == '-' && a[1] != '\0') {
            /* "--name=value" or "--name value". */
            const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            const cli_opt *o = spec->opts;
            for (; o && o->name; o++)
                if ((strlen(o->name) == len && strncmp(o->name, a, len) == 0) ||
                    (o->alias && strlen(o->alias) == len && strncmp(o->alias, a, len) == 0))
                    break;
            if (!o || !o->name) return cli_usage_error(spec, "unknown option '%s'", a);
            if (!o->metavar) {
                if (eq) return cli_usage_error(spec, "option '%s' takes no value", o->name);
                *o->flag = true;
            } else if (eq) {
                *o->value = eq + 1;
            } else {
                if (i + 1 >= argc) return cli_usage_error(spec, "option '%s' needs a value (%s)", o->name, o->metavar);
                *o->value = argv[++i];
            }
            continue;
        }
        if (*n_pos >= spec->max_pos) return cli_usage_error(spec, "unexpected argument '%s'", a);
        pos[(*n_pos)++] = a;
    }
    if (*n_pos < spec->min_pos)
        return cli_usage_error(spec, "expected %s", spec->args[0] ? spec->args : "no arguments");
    return CLI_CONTINUE;
}

int cli_fail(const char *verb, const char *context) {
    const char *msg = otter_last_error();
    fprintf(stderr, "otter %s: %s%s%s\n", verb, context ? context : "", context && msg[0] ? ": " : "", msg);
    return CLI_EXIT_INVALID;
}

bool cli_load(const char *verb, const char *path, otter_model **m) {
    if (otter_model_load(m, path) != OTTER_OK) {
        cli_fail(verb, NULL);
        return false;
    }
    return true;
}

bool cli_save(const char *verb, const otter_model *m, const char *path, const otter_save_options *opts) {
    if (otter_model_save(m, path, opts) != OTTER_OK) {
        cli_fail(verb, NULL);
        return false;
    }
    return true;
}

bool cli_save_edited(const char *verb, const otter_model *m, const char *path) {
    if (otter_model_check(m, NULL) != OTTER_OK) {
        fprintf(stderr, "otter %s: the result is not a valid model, nothing written to %s: %s\n", verb, path,
                otter_last_error());
        return false;
    }
    return cli_save(verb, m, path, NULL);
}

char **cli_split(const char *s, size_t *n) {
    size_t cap = 2;
    for (const char *p = s; *p; p++) cap += *p == ',';
    char **list = calloc(cap, sizeof *list);
    if (!list) return NULL;
    size_t k = 0;
    const char *start = s;
    for (const char *p = s;; p++) {
        if (*p != ',' && *p != '\0') continue;
        if (p > start) {
            list[k] = malloc((size_t)(p - start) + 1);
            if (!list[k]) {
                cli_list_free(list);
                return NULL;
            }
            memcpy(list[k], start, (size_t)(p - start));
            list[k][p - start] = '\0';
            k++;
        }
        if (*p == '\0') break;
        start = p + 1;
    }
    if (n) *n = k;
    return list;
}

void cli_list_free(char **list) {
    if (!list) return;
    for (char **p = list; *p; p++) free(*p);
    free(list);
}

bool cli_parse_size(const char *s, size_t *out) {
    if (!s || !isdigit((unsigned char)s[0])) return false;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024ull, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024ull * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024ull * 1024 * 1024, end++;
    if (*end != '\0' || v > SIZE_MAX / mul) return false;
    *out = (size_t)(v * mul);
    return true;
}

bool cli_parse_norm(const char *text, otter_data_norm *out) {
    static const struct {
        const char *name;
        otter_data_norm norm;
    } names[] = {{"none", OTTER_NORM_NONE}, {"scale", OTTER_NORM_SCALE}, {"standard", OTTER_NORM_STANDARD}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(text, names[i].name) == 0) {
            *out = names[i].norm;
            return true;
        }
    return false;
}

bool cli_parse_int(const char *text, long long lo, long long *out) {
    char *end;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || v < lo) return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *text, double lo, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (!*text || *end || !isfinite(v) || v < lo) return false;
    *out = v;
    return true;
}

bool cli_curve_add(cli_curve *c, double x, double y) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        double *nx = realloc(c->x, cap * sizeof *nx);
        if (!nx) return false;
        c->x = nx;
        double *ny = realloc(c->y, cap * sizeof *ny);
        if (!ny) return false;
        c->y = ny;
        c->cap = cap;
    }
    c->x[c->n] = x, c->y[c->n] = y, c->n++;
    return true;
}

void cli_curve_free(cli_curve *c) {
    free(c->x), free(c->y);
    *c = (cli_curve){0};
}

typedef struct op_total {
    const char *op_type;
    double ms;
    uint64_t nodes;
} op_total;

static int cmp_total_desc(const void *a, const void *b) {
    double x = ((const op_total *)a)->ms, y = ((const op_total *)b)->ms;
    return x > y ? -1 : x < y;
}

static int cmp_node_desc(const void *a, const void *b) {
    double x = ((const otter_node_profile *)a)->total_ms, y = ((const otter_node_profile *)b)->total_ms;
    return x > y ? -1 : x < y;
}

int cli_print_profile(const char *verb, otter_node_profile *p, size_t n, const otter_node_profile *first,
                      size_t n_first, long runs, const char *unit) {
    op_total *t = calloc(n + 1, sizeof *t);
    if (!p || !t) {
        free(t);
        fprintf(stderr, "otter %s: out of memory\n", verb);
        return CLI_EXIT_INVALID;
    }
    /* nodes keep their execution order from run to run */
    for (size_t i = 0; first && i < n && i < n_first; i++) p[i].total_ms -= first[i].total_ms;
    size_t n_ops = 0;
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < n_ops && strcmp(t[k].op_type, p[i].op_type) != 0) k++;
        if (k == n_ops) t[n_ops++] = (op_total){p[i].op_type, 0, 0};
        t[k].ms += p[i].total_ms, t[k].nodes++, total += p[i].total_ms;
    }
    qsort(t, n_ops, sizeof *t, cmp_total_desc);
    char per[32];
    snprintf(per, sizeof per, "ms/%s", unit);
    printf("profile: %.3f ms per %s in %zu kernels\n%-28s %6s %10s %7s\n", total / (double)runs, unit, n, "operator",
           "nodes", per, "share");
    for (size_t k = 0; k < n_ops; k++)
        printf("%-28s %6llu %10.3f %6.1f%%\n", t[k].op_type, (unsigned long long)t[k].nodes, t[k].ms / (double)runs,
               total > 0 ? 100 * t[k].ms / total : 0);
    qsort(p, n, sizeof *p, cmp_node_desc);
    printf("slowest nodes:\n");
    for (size_t i = 0; i < n && i < 10; i++)
        printf("  %-40s %-28s %10.3f ms/%s\n", p[i].name[0] ? p[i].name : "(unnamed)", p[i].op_type,
               p[i].total_ms / (double)runs, unit);
    free(t);
    return CLI_EXIT_OK;
}
