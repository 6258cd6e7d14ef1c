/* otter: line plots as SVG, for training curves (loss per step, loss and accuracy per epoch) and federated
 * rounds. One or more panels side by side; each panel has a left axis and, for the series marked
 * right_axis (accuracy), its own right axis. Tick values are 1, 2 or 5 x 10^k (whole numbers only on an
 * integer x axis such as rounds or epochs); the legend sits below the plot area, never over the data.
 *
 *     otter_plot_series s[] = {{.label = "train loss", .x = rounds, .y = loss, .n = n},
 *                              {.label = "eval accuracy", .x = rounds, .y = acc, .n = n, .right_axis = true}};
 *     otter_plot_panel p = {.title = "federated training", .x_label = "round", .y_label = "loss",
 *                           .right_label = "accuracy", .integer_x = true, .series = s, .n_series = 2};
 *     otter_plot_svg_save("rounds.svg", &p, 1);
 */
#ifndef OTTER_PLOT_H
#define OTTER_PLOT_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct otter_plot_series {
    const char *label;
    const double *x, *y; /* n points; a non-finite y leaves a gap */
    size_t n;
    bool right_axis; /* drawn against the panel's right axis */
    bool markers;    /* a dot at every point */
} otter_plot_series;

typedef struct otter_plot_panel {
    const char *title, *x_label;
    const char *y_label;     /* the left axis */
    const char *right_label; /* the right axis (when a series is right_axis) */
    bool integer_x;          /* x counts rounds, epochs or steps: ticks on whole numbers */
    const otter_plot_series *series;
    size_t n_series;
} otter_plot_panel;

/* The SVG document as a NUL-terminated string allocated with the library's allocator (free with
 * otter_free); *len (may be NULL) gets its length. */
OTTER_API otter_status otter_plot_svg(const otter_plot_panel *panels, size_t n_panels, char **svg, size_t *len);
/* The same written to path atomically (temporary file, rename). Errors name the path. */
OTTER_API otter_status otter_plot_svg_save(const char *path, const otter_plot_panel *panels, size_t n_panels);

#ifdef __cplusplus
}
#endif
#endif
