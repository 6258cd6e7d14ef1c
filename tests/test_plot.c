/* The SVG plotter (otter/plot.h), read back from its output: tick labels are evenly spaced multiples of 1, 2 or
 * 5 x 10^k (whole numbers on an integer axis), the y axes' ticks enclose their data, the accuracy series gets
 * the right axis, every data point lies inside the plot area and the legend lies below it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/otter.h"
#include "otter/plot.h"
#include "testutil.h"

/* Values of the <text class='CLS' ...>V</text> elements, in document order. */
static size_t tick_values(const char *svg, const char *cls, double *out, size_t cap) {
    char key[32];
    snprintf(key, sizeof key, "class='%s'", cls);
    size_t n = 0;
    for (const char *p = strstr(svg, key); p && n < cap; p = strstr(p + 1, key)) {
        const char *gt = strchr(p, '>');
        if (gt) out[n++] = strtod(gt + 1, NULL);
    }
    return n;
}

static double attr(const char *el, const char *name) {
    char key[32];
    snprintf(key, sizeof key, " %s='", name);
    const char *p = strstr(el, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* Evenly spaced, the step m x 10^k with m in {1, 2, 5} (and whole on an integer axis); at least 3 ticks. */
static bool nice_ticks(const double *v, size_t n, bool integer, double *step) {
    if (n < 3) return false;
    *step = v[1] - v[0];
    double k = floor(log10(*step) + 1e-9), m = *step / pow(10, k);
    bool ok = fabs(m - 1) < 1e-6 || fabs(m - 2) < 1e-6 || fabs(m - 5) < 1e-6;
    for (size_t i = 1; i < n; i++) ok = ok && fabs(v[i] - v[i - 1] - *step) < 1e-6 * *step;
    for (size_t i = 0; integer && i < n; i++) ok = ok && v[i] == floor(v[i]);
    return ok;
}

static void check_panel(const char *what, const char *svg, bool integer_x, double lo_y, double hi_y, double lo_r,
                        double hi_r) {
    double xt[64], yt[64], rt[64], sx = 0, sy = 0, sr = 0;
    size_t nx = tick_values(svg, "xtick", xt, 64), ny = tick_values(svg, "ytick", yt, 64);
    size_t nr = tick_values(svg, "rtick", rt, 64);
    bool okx = nice_ticks(xt, nx, integer_x, &sx), oky = nice_ticks(yt, ny, false, &sy);
    bool okr = nice_ticks(rt, nr, false, &sr);
    printf("%s: %zu x ticks %g..%g step %g, %zu left %g..%g step %g, %zu right %g..%g step %g\n", what, nx, xt[0],
           xt[nx ? nx - 1 : 0], sx, ny, yt[0], yt[ny ? ny - 1 : 0], sy, nr, rt[0], rt[nr ? nr - 1 : 0], sr);
    CHECK(okx && oky && okr);
    CHECK(ny && yt[0] <= lo_y && yt[ny - 1] >= hi_y);
    CHECK(nr && rt[0] <= lo_r && rt[nr - 1] >= hi_r);

    const char *area = strstr(svg, "class='plot-area'");
    CHECK(area != NULL);
    if (!area) return;
    double ax = attr(area, "x"), ay = attr(area, "y"), aw = attr(area, "width"), ah = attr(area, "height");
    size_t points = 0, outside = 0;
    for (const char *p = strstr(svg, "points='"); p; p = strstr(p + 1, "points='")) {
        const char *q = p + 8;
        char *end;
        for (;;) {
            double px = strtod(q, &end);
            if (end == q || *end != ',') break;
            double py = strtod(end + 1, &end);
            points++;
            outside += px < ax - 0.05 || px > ax + aw + 0.05 || py < ay - 0.05 || py > ay + ah + 0.05;
            q = end;
        }
    }
    double legend_top = INFINITY;
    const char *lg = strstr(svg, "class='legend'"), *lg_end = lg ? strstr(lg, "</g>") : NULL;
    for (const char *p = lg; p && p < lg_end; p = strstr(p + 1, "<text")) {
        double y = attr(p, "y");
        if (isfinite(y) && p != lg) legend_top = fmin(legend_top, y - 12); /* 12px font: top of the text */
    }
    printf("%s: %zu polyline points, %zu outside the plot area [%g, %g] x [%g, %g]; legend top %g\n", what, points,
           outside, ax, ax + aw, ay, ay + ah, legend_top);
    CHECK(points > 0 && outside == 0);
    CHECK(isfinite(legend_top) && legend_top > ay + ah + 16); /* below the x tick labels too */
}

int main(void) {
    enum { R = 37 };
    double x[R], loss[R], acc[R];
    for (int i = 0; i < R; i++) {
        x[i] = i + 1;
        loss[i] = 2.3 * exp(-0.08 * i) + 0.05;
        acc[i] = i == 4 ? NAN : 0.1 + 0.85 * (1 - exp(-0.15 * i)); /* a round without evaluation: a gap */
    }
    otter_plot_series s[] = {{"train loss", x, loss, R, false, true}, {"eval accuracy", x, acc, R, true, true}};
    otter_plot_panel p = {"federated training", "round", "loss", "accuracy", true, s, 2};
    char *svg = NULL;
    CHECK_OK(otter_plot_svg(&p, 1, &svg, NULL));
    if (svg) check_panel("37 rounds", svg, true, 0.05, 2.35, 0.1, 0.95);
    otter_free(svg), svg = NULL;

    /* A fractional x axis and one round only (a single point on an integer axis). */
    double fx[5] = {0, 0.1, 0.2, 0.3, 0.37}, fy[5] = {3, 2.5, 2.2, 2.1, 2.05}, fa[5] = {0.5, 0.6, 0.7, 0.72, 0.74};
    otter_plot_series fs[] = {{"loss", fx, fy, 5, false, false}, {"accuracy", fx, fa, 5, true, false}};
    otter_plot_panel fp = {"fractional", "x", "loss", "accuracy", false, fs, 2};
    CHECK_OK(otter_plot_svg(&fp, 1, &svg, NULL));
    if (svg) check_panel("fractional x", svg, false, 2.05, 3, 0.5, 0.74);
    otter_free(svg), svg = NULL;
    double one_x = 1, one_l = 0.7, one_a = 0.8;
    otter_plot_series os[] = {{"loss", &one_x, &one_l, 1, false, true}, {"accuracy", &one_x, &one_a, 1, true, true}};
    otter_plot_panel op = {"one round", "round", "loss", "accuracy", true, os, 2};
    CHECK_OK(otter_plot_svg(&op, 1, &svg, NULL));
    if (svg) check_panel("one round", svg, true, 0.7, 0.7, 0.8, 0.8);
    otter_free(svg);

    const char *path = tu_tmp_path("plot.svg");
    CHECK_OK(otter_plot_svg_save(path, &p, 1));
    size_t n = 0;
    char *back = tu_read_file(path, &n);
    CHECK(back && n > 100 && strncmp(back, "<svg", 4) == 0 && strstr(back, "</svg>"));
    free(back);
    CHECK_STATUS(otter_plot_svg_save(tu_tmp_path("no/such/dir/plot.svg"), &p, 1), OTTER_ERR_IO);
    return tu_finish("test_plot");
}
