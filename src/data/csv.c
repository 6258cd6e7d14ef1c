/* CSV: one sample a line, comma-separated numbers; one label column (or k target columns), the rest inputs.
 * An optional header line; blank lines are skipped; errors name the file, line and column (1-based). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

typedef struct line_cursor {
    char *p, *end; /* the rest of the file */
    int64_t lineno;
} line_cursor;

/* Next line [*b, *e) without its \r\n; false at the end. */
static bool next_line(line_cursor *c, char **b, char **e) {
    if (c->p >= c->end) return false;
    char *s = c->p, *nl = memchr(s, '\n', (size_t)(c->end - s));
    char *stop = nl ? nl : c->end;
    c->p = nl ? nl + 1 : c->end;
    c->lineno++;
    if (stop > s && stop[-1] == '\r') stop--;
    *b = s;
    *e = stop;
    return true;
}

static bool blank(const char *b, const char *e) {
    for (; b < e; b++)
        if (*b != ' ' && *b != '\t') return false;
    return true;
}

static int64_t count_fields(const char *b, const char *e) {
    int64_t n = 1;
    for (; b < e; b++) n += *b == ',';
    return n;
}

/* Parse field at *p (up to the next comma or e). false when it is not a number. */
static bool parse_field(char **p, char *e, double *v) {
    char *s = *p;
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    char *fe = memchr(s, ',', (size_t)(e - s));
    if (!fe) fe = e;
    char saved = *fe; /* the buffer is ours and NUL-terminated past the end */
    *fe = '\0';
    char *end = NULL;
    *v = strtod(s, &end);
    *fe = saved;
    bool ok = end != s;
    while (end < fe && (*end == ' ' || *end == '\t')) end++;
    ok = ok && end == fe && isfinite(*v);
    *p = fe < e ? fe + 1 : e;
    return ok;
}

static bool line_is_numeric(char *b, char *e) {
    char *p = b;
    int64_t n = count_fields(b, e);
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (!parse_field(&p, e, &v)) return false;
    }
    return true;
}

otter_status ot_csv_load(ot_data_raw *raw, const char *path, const otter_dataset_options *opts) {
    void *data = NULL;
    size_t size = 0;
    OT_TRY(ot_read_file(path, &data, &size));
    otter_status s = OTTER_OK;
    line_cursor c = {data, (char *)data + size, 0};
    char *b, *e;
    /* Pass 1: header, columns, rows. */
    int64_t first_data_line = 0, ncols = 0, rows = 0;
    bool header_seen = false;
    while (next_line(&c, &b, &e)) {
        if (blank(b, e)) continue;
        if (!header_seen) {
            header_seen = true;
            bool skip = opts->csv_header == OTTER_CSV_HEADER_YES ||
                        (opts->csv_header == OTTER_CSV_HEADER_AUTO && !line_is_numeric(b, e));
            if (skip) continue;
        }
        if (!first_data_line) {
            first_data_line = c.lineno;
            ncols = count_fields(b, e);
        }
        rows++;
    }
    if (rows == 0) {
        s = ot_error(OTTER_ERR_INVALID, "%s: no data lines", path);
        goto fail;
    }
    int64_t lc = opts->csv_label_column < 0 ? ncols + opts->csv_label_column : opts->csv_label_column;
    bool want_float = opts->targets == OTTER_TARGETS_FLOAT;
    int64_t k = want_float && opts->csv_num_targets > 0 ? opts->csv_num_targets : 1;
    if (lc < 0 || lc + k > ncols) {
        s = ot_error(OTTER_ERR_ARGUMENT,
                     "%s: label column %d (and %lld target columns) outside the %lld columns of line %lld", path,
                     opts->csv_label_column, (long long)k, (long long)ncols, (long long)first_data_line);
        goto fail;
    }
    int64_t F = ncols - k;
    if (F < 1) {
        s = ot_error(OTTER_ERR_INVALID, "%s: line %lld has no input columns besides the targets", path,
                     (long long)first_data_line);
        goto fail;
    }
    float *x = ot_malloc((size_t)(rows * F) * sizeof(float));
    raw->x = x;
    if (want_float)
        raw->targets = ot_malloc((size_t)(rows * k) * sizeof(float));
    else
        raw->labels = ot_malloc((size_t)rows * sizeof(int64_t));
    if (!x || (!raw->targets && !raw->labels)) {
        s = OT_NOMEM();
        goto fail;
    }
    /* Pass 2: values. */
    c = (line_cursor){data, (char *)data + size, 0};
    int64_t r = 0, maxl = -1;
    while (next_line(&c, &b, &e)) {
        if (c.lineno < first_data_line || blank(b, e)) continue;
        int64_t nf = count_fields(b, e);
        if (nf != ncols) {
            s = ot_error(OTTER_ERR_INVALID, "%s: line %lld: %lld fields, expected %lld (as on line %lld)", path,
                         (long long)c.lineno, (long long)nf, (long long)ncols, (long long)first_data_line);
            goto fail;
        }
        char *p = b;
        int64_t fi = 0;
        for (int64_t col = 0; col < ncols; col++) {
            char *fstart = p;
            double v;
            if (!parse_field(&p, e, &v)) {
                char *fend = memchr(fstart, ',', (size_t)(e - fstart));
                int flen = (int)((fend ? fend : e) - fstart);
                s = ot_error(OTTER_ERR_INVALID, "%s: line %lld, column %lld: '%.*s' is not a number", path,
                             (long long)c.lineno, (long long)col + 1, flen > 40 ? 40 : flen, fstart);
                goto fail;
            }
            if (col >= lc && col < lc + k) {
                if (want_float) {
                    raw->targets[r * k + (col - lc)] = (float)v;
                    continue;
                }
                if (v != floor(v) || v < 0 || v > 9.0e18 || (opts->num_classes > 0 && v >= (double)opts->num_classes)) {
                    if (opts->num_classes > 0 && v == floor(v) && v >= 0)
                        s = ot_error(OTTER_ERR_INVALID,
                                     "%s: line %lld, column %lld: label %g is out of range for %lld classes", path,
                                     (long long)c.lineno, (long long)col + 1, v, (long long)opts->num_classes);
                    else
                        s = ot_error(OTTER_ERR_INVALID,
                                     "%s: line %lld, column %lld: %g is not a class label (a whole number >= 0)", path,
                                     (long long)c.lineno, (long long)col + 1, v);
                    goto fail;
                }
                raw->labels[r] = (int64_t)v;
                if (raw->labels[r] > maxl) maxl = raw->labels[r];
                continue;
            }
            x[r * F + fi++] = (float)v;
        }
        r++;
    }
    OT_ASSERT(r == rows);
    ot_free(data);
    raw->u8 = false;
    raw->n = rows;
    raw->rank = 1;
    raw->dims[0] = F;
    raw->k = k;
    raw->num_classes = want_float ? 0 : (opts->num_classes > 0 ? opts->num_classes : maxl + 1);
    return OTTER_OK;
fail:
    ot_free(data);
    return s;
}
