/* Tiny test harness: CHECK records a failure and keeps going; tests print what they compared. */
#ifndef OTTER_TESTUTIL_H
#define OTTER_TESTUTIL_H

#include <stdio.h>

#include "otter/otter.h"

extern int tu_failures;
extern int tu_checks;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        tu_checks++;                                                                                                   \
        if (!(cond)) {                                                                                                 \
            tu_failures++;                                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                                   \
        }                                                                                                              \
    } while (0)
/* Expect an otter call to succeed; prints otter_last_error() otherwise. */
#define CHECK_OK(expr)                                                                                                 \
    do {                                                                                                               \
        tu_checks++;                                                                                                   \
        otter_status tu_s_ = (expr);                                                                                   \
        if (tu_s_ != OTTER_OK) {                                                                                       \
            tu_failures++;                                                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr, otter_status_name(tu_s_),         \
                    otter_last_error());                                                                               \
        }                                                                                                              \
    } while (0)
/* Expect a specific failure status. */
#define CHECK_STATUS(expr, want)                                                                                       \
    do {                                                                                                               \
        tu_checks++;                                                                                                   \
        otter_status tu_s_ = (expr);                                                                                   \
        if (tu_s_ != (want)) {                                                                                         \
            tu_failures++;                                                                                             \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, #expr,                    \
                    otter_status_name(tu_s_), otter_status_name(want), otter_last_error());                            \
        }                                                                                                              \
    } while (0)

/* Print the summary line and return the process exit code: 1 when a check failed or when no check ran at all
 * (a test that compared nothing proves nothing). */
int tu_finish(const char *name);

/* NaN-safe running maximum for error checks: the larger of worst and err, and NaN from the first NaN on, so a
 * NaN result fails the final `worst <= tol` (the plain `if (err > worst) worst = err` and fmax skip NaN). */
double tu_worse(double worst, double err);
/* max_i |got[i] - want[i]| over float arrays, NaN when any difference is NaN (see tu_worse). */
double tu_max_abs_diff(const float *got, const float *want, size_t n);
/* Append a node to g: ins/outs are space-separated tensor names, "-" for an omitted input. */
otter_node *tu_add_node(otter_graph *g, const char *op, const char *name, const char *ins, const char *outs);
/* A type as otter_type_to_text writes it ("float32[2,?]", "seq(int64[3])", "?"), copied into buf. */
const char *tu_type_text(const otter_type *t, char *buf, size_t size);
/* Path under the source tree / a scratch folder under the build tree (static buffers). */
const char *tu_src_path(const char *rel);
const char *tu_tmp_path(const char *name);
/* The whole file in a malloc'd buffer with a NUL byte after it; its size in *n. NULL (and *n = 0) when the
 * file can't be opened or read in full. */
void *tu_read_file(const char *path, size_t *n);

/* A counting allocator, for otter_set_allocator(&tu_counting_allocator). tu_alloc_live: allocations made
 * through it and not yet freed; tu_alloc_calls: malloc/realloc calls since the last tu_alloc_fail_at;
 * tu_alloc_biggest: the largest request. */
extern const otter_allocator tu_counting_allocator;
extern long tu_alloc_live, tu_alloc_calls;
extern size_t tu_alloc_biggest;
/* Start counting calls from 0 again; call number n (1, 2, ...) returns NULL; n <= 0: none fails. */
void tu_alloc_fail_at(long n);

#endif
