/* Tiny test harness: CHECK records a failure and keeps going; tests print what they compared. */
#ifndef OTTER_TESTUTIL_H
#define OTTER_TESTUTIL_H

#include <stdio.h>

#include "otter/otter.h"

extern int tu_failures;
extern int tu_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        tu_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)
/* Expect an otter call to succeed; prints otter_last_error() otherwise. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        tu_checks++;                                                                               \
        otter_status tu_s_ = (expr);                                                               \
        if (tu_s_ != OTTER_OK) {                                                                   \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr,               \
                    otter_status_name(tu_s_), otter_last_error());                                 \
        }                                                                                          \
    } while (0)
/* Expect a specific failure status. */
#define CHECK_STATUS(expr, want)                                                                   \
    do {                                                                                           \
        tu_checks++;                                                                               \
        otter_status tu_s_ = (expr);                                                               \
        if (tu_s_ != (want)) {                                                                     \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__,       \
                    #expr, otter_status_name(tu_s_), otter_status_name(want), otter_last_error()); \
        }                                                                                          \
    } while (0)

/* Print the summary line and return the process exit code. */
int tu_finish(const char *name);
/* Path under the source tree / a scratch folder under the build tree (static buffers). */
const char *tu_src_path(const char *rel);
const char *tu_tmp_path(const char *name);

#endif
