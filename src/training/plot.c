/* Line plots as SVG (include/otter/plot.h): panels side by side, a left axis and an optional right one,
 * ticks at 1, 2 or 5 x 10^k, the legend below the plot area. Elements carry classes (plot-area, xtick,
 * ytick, rtick, legend) so that tests and scripts can find them. */
#include "otter/plot.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* Geometry of one panel, in SVG pixels. */
enum { PANEL_W = 500, MARGIN_L = 70, MARGIN_R = 70, MARGIN_T = 40, AREA_H = 260, LEGEND_GAP = 56, LEGEND_ROW = 16 };
#define AREA_W (PANEL_W - MARGIN_L - MARGIN_R)

static const char *const COLORS[] = {"#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb"};
#define N_COLORS (sizeof COLORS / sizeof COLORS[0])

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if (b->p && (size_t)k < b->cap - b->len) {
            b->len += (size_t)k;
            return;
        }
        void *arr = b->p;
        if (ot_grow(&arr, &b->cap, b->len + (size_t)k + 1, 1) != OTTER_OK) {
            b->failed = true;
            return;
        }
        b->p = arr;
    }
}

/* Text content with XML's special characters escaped. */
static void put_text(sbuf *b, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<')
            put(b, "&lt;");
        else if (*s == '>')
            put(b, "&gt;");
        else if (*s == '&')
            put(b, "&amp;");
        else if (*s == '\'')
            put(b, "&apos;");
        else
            put(b, "%c", *s);
    }
}

/* An axis: the data range widened to whole ticks (or kept as is for x), ticks every `step`. */
typedef struct axis {
    double lo, hi, step;
    bool used;
} axis;

/* The largest step 1, 2 or 5 x 10^k that still puts at least four ticks on span (>= 1 on an integer axis). */
static double tick_step(double span, bool integer) {
    static const double MULTIPLES[] = {5, 2, 1};
    double mag = pow(10, floor(log10(span / 4))), step = mag; /* span / mag >= 4 */
    for (size_t i = 0; i < 3; i++)
        if (span / (MULTIPLES[i] * mag) >= 4) {
            step = MULTIPLES[i] * mag;
            break;
        }
    return integer && step < 1 ? 1 : step;
}

static axis data_axis(const otter_plot_panel *p, bool right, bool is_x) {
    axis a = {INFINITY, -INFINITY, 1, false};
    for (size_t k = 0; k < p->n_series; k++) {
        const otter_plot_series *s = &p->series[k];
        if (!is_x && s->right_axis != right) continue;
        for (size_t i = 0; i < s->n; i++) {
            double v = is_x ? s->x[i] : s->y[i];
            if (!isfinite(v) || (is_x && !isfinite(s->y[i]))) continue;
            a.lo = fmin(a.lo, v), a.hi = fmax(a.hi, v), a.used = true;
        }
    }
    if (!a.used) return (axis){0, 1, 0.2, false};
    if (a.hi == a.lo) { /* one value: a unit around it */
        double half = is_x && p->integer_x ? 1 : fmax(fabs(a.lo) * 0.05, 0.5);
        a.lo -= half, a.hi += half;
    }
    a.step = tick_step(a.hi - a.lo, is_x && p->integer_x);
    if (!is_x) /* y axes end on ticks, so the data never touches the frame's corners unlabeled */
        a.lo = floor(a.lo / a.step) * a.step, a.hi = ceil(a.hi / a.step) * a.step;
    return a;
}

static double to_px(const axis *a, double v, double p0, double len) { return p0 + len * (v - a->lo) / (a->hi - a->lo); }

/* Tick labels at the multiples of the step inside the axis. */
static void put_ticks(sbuf *b, const axis *a, const char *cls, double x0, double y0, bool vertical, bool right) {
    double first = ceil(a->lo / a->step - 1e-9) * a->step;
    for (int i = 0; i < 100; i++) {
        double v = first + i * a->step;
        if (v > a->hi + a->step * 1e-9) break;
        if (fabs(v) < a->step * 1e-9) v = 0; /* no "-0" or 1e-17 */
        if (vertical) {
            double py = to_px(a, v, y0 + AREA_H, -AREA_H);
            if (!right)
                put(b, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>\n", x0, py, x0 + AREA_W, py);
            double tx = right ? x0 + AREA_W + 4 : x0 - 4;
            put(b, "<text class='%s' x='%.1f' y='%.1f' text-anchor='%s' font-size='11'>%.6g</text>\n", cls, tx, py + 4,
                right ? "start" : "end", v);
        } else {
            double px = to_px(a, v, x0, AREA_W);
            put(b, "<text class='%s' x='%.1f' y='%.1f' text-anchor='middle' font-size='11'>%.6g</text>\n", cls, px,
                y0 + AREA_H + 16, v);
        }
    }
}

static void put_series(sbuf *b, const otter_plot_series *s, const axis *ax, const axis *ay, double x0, double y0,
                       const char *color) {
    bool open = false;
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(s->y[i]) || !isfinite(s->x[i])) { /* a gap ends the polyline */
            if (open) put(b, "'/>\n");
            open = false;
            continue;
        }
        if (!open) put(b, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", color);
        open = true;
        put(b, "%.1f,%.1f ", to_px(ax, s->x[i], x0, AREA_W), to_px(ay, s->y[i], y0 + AREA_H, -AREA_H));
    }
    if (open) put(b, "'/>\n");
    for (size_t i = 0; s->markers && i < s->n; i++)
        if (isfinite(s->y[i]) && isfinite(s->x[i]))
            put(b, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", to_px(ax, s->x[i], x0, AREA_W),
                to_px(ay, s->y[i], y0 + AREA_H, -AREA_H), color);
}

static void put_axis_label(sbuf *b, const char *label, double x, double y, bool right) {
    put(b, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12' transform='rotate(%d %.1f %.1f)'>", x, y,
        right ? 90 : -90, x, y);
    put_text(b, label);
    put(b, "</text>\n");
}

static void put_panel(sbuf *b, const otter_plot_panel *p, double x0, double y0) {
    axis ax = data_axis(p, false, true), ay = data_axis(p, false, false), ar = data_axis(p, true, false);
    put(b, "<rect class='plot-area' x='%.1f' y='%.1f' width='%d' height='%d' fill='none' stroke='#999'/>\n", x0, y0,
        AREA_W, AREA_H);
    put(b, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='14'>", x0 + AREA_W / 2.0, y0 - 10);
    put_text(b, p->title);
    put(b, "</text>\n<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>", x0 + AREA_W / 2.0,
        y0 + AREA_H + 34);
    put_text(b, p->x_label);
    put(b, "</text>\n");
    put_ticks(b, &ax, "xtick", x0, y0, false, false);
    put_ticks(b, &ay, "ytick", x0, y0, true, false);
    if (p->y_label) put_axis_label(b, p->y_label, x0 - 52, y0 + AREA_H / 2.0, false);
    if (ar.used) {
        put_ticks(b, &ar, "rtick", x0, y0, true, true);
        if (p->right_label) put_axis_label(b, p->right_label, x0 + AREA_W + 52, y0 + AREA_H / 2.0, true);
    }
    for (size_t k = 0; k < p->n_series; k++)
        put_series(b, &p->series[k], &ax, p->series[k].right_axis ? &ar : &ay, x0, y0, COLORS[k % N_COLORS]);
    double ly = y0 + AREA_H + LEGEND_GAP;
    put(b, "<g class='legend'>\n");
    for (size_t k = 0; k < p->n_series; k++) {
        double ry = ly + (double)k * LEGEND_ROW;
        put(b, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2'/>\n", x0, ry - 4, x0 + 20,
            ry - 4, COLORS[k % N_COLORS]);
        put(b, "<text x='%.1f' y='%.1f' font-size='12'>", x0 + 26, ry);
        put_text(b, p->series[k].label);
        put(b, "%s</text>\n", p->series[k].right_axis ? " (right axis)" : "");
    }
    put(b, "</g>\n");
}

otter_status otter_plot_svg(const otter_plot_panel *panels, size_t n_panels, char **svg, size_t *len) {
    if (!panels || !n_panels || !svg) return ot_error(OTTER_ERR_ARGUMENT, "otter_plot_svg: no panels or NULL output");
    size_t rows = 0;
    for (size_t i = 0; i < n_panels; i++) {
        for (size_t k = 0; k < panels[i].n_series; k++)
            if (!panels[i].series[k].x || !panels[i].series[k].y)
                if (panels[i].series[k].n)
                    return ot_error(OTTER_ERR_ARGUMENT, "otter_plot_svg: series '%s' has points but no x or y",
                                    panels[i].series[k].label ? panels[i].series[k].label : "");
        rows = panels[i].n_series > rows ? panels[i].n_series : rows;
    }
    int width = PANEL_W * (int)n_panels, height = MARGIN_T + AREA_H + LEGEND_GAP + LEGEND_ROW * (int)rows;
    sbuf b = {0};
    put(&b, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif'>\n", width,
        height);
    put(&b, "<rect width='%d' height='%d' fill='white'/>\n", width, height);
    for (size_t i = 0; i < n_panels; i++) {
        put(&b, "<g class='panel'>\n");
        put_panel(&b, &panels[i], (double)(PANEL_W * (int)i + MARGIN_L), MARGIN_T);
        put(&b, "</g>\n");
    }
    put(&b, "</svg>\n");
    if (b.failed) {
        ot_free(b.p);
        return OT_NOMEM();
    }
    *svg = b.p;
    if (len) *len = b.len;
    return OTTER_OK;
}

otter_status otter_plot_svg_save(const char *path, const otter_plot_panel *panels, size_t n_panels) {
    if (!path) return ot_error(OTTER_ERR_ARGUMENT, "otter_plot_svg_save: NULL path");
    char *svg = NULL;
    size_t len = 0;
    OT_TRY(otter_plot_svg(panels, n_panels, &svg, &len));
    otter_status st = ot_write_file_atomic(path, svg, len);
    ot_free(svg);
    return st;
}
