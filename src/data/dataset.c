/* Datasets: the spec parser, normalization and layout, npy pairs and tensors in memory, and gather (the one
 * place samples become float rows). */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_internal.h"
#include "otter/io.h"

static const float MNIST_MEAN[] = {0.1307f}, MNIST_STD[] = {0.3081f};
static const float FASHION_MEAN[] = {0.2860f}, FASHION_STD[] = {0.3530f};
static const float CIFAR_MEAN[] = {0.4914f, 0.4822f, 0.4465f}, CIFAR_STD[] = {0.2470f, 0.2435f, 0.2616f};

void ot_data_raw_release(ot_data_raw *raw) {
    ot_free(raw->desc);
    ot_free(raw->x);
    ot_free(raw->labels);
    ot_free(raw->targets);
    memset(raw, 0, sizeof *raw);
}

void otter_dataset_free(otter_dataset *ds) {
    if (!ds) return;
    ot_free(ds->desc);
    ot_free(ds->x);
    ot_free(ds->lut);
    ot_free(ds->mean);
    ot_free(ds->stdv);
    ot_free(ds->labels);
    ot_free(ds->targets);
    for (size_t i = 0; i < ds->n_columns; i++) {
        otter_tensor_free(ds->columns[i]);
        ot_free(ds->column_files[i]);
    }
    ot_free(ds->columns);
    ot_free(ds->column_files);
    ot_free(ds);
}

static int64_t prod(const int64_t *d, int r) {
    int64_t p = 1;
    for (int i = 0; i < r; i++) p *= d[i];
    return p;
}

otter_status ot_dataset_finish(otter_dataset **out, ot_data_raw *raw, const otter_dataset_options *opts) {
    static const otter_dataset_options defaults = {0};
    if (!opts) opts = &defaults;
    otter_status s = OTTER_OK;
    otter_dataset *ds = NULL;
    if (raw->n <= 0) {
        s = ot_error(OTTER_ERR_INVALID, "%s: holds no samples", raw->desc);
        goto fail;
    }
    ds = ot_calloc(1, sizeof *ds);
    if (!ds) goto nomem;
    int64_t numel = prod(raw->dims, raw->rank);
    ds->n = raw->n;
    ds->numel = numel;
    ds->u8 = raw->u8;
    ds->channels = raw->rank >= 1 ? raw->dims[0] : 1;
    if (ds->channels <= 0) ds->channels = 1;
    ds->chan_block = numel / ds->channels;
    bool flat = opts->layout == OTTER_LAYOUT_FLAT || (opts->layout == OTTER_LAYOUT_DEFAULT && raw->flat_default);
    if (flat) {
        ds->rank = 1;
        ds->dims[0] = numel;
    } else {
        ds->rank = raw->rank;
        memcpy(ds->dims, raw->dims, sizeof raw->dims);
    }

    otter_data_norm norm = opts->norm;
    if (norm == OTTER_NORM_DEFAULT) norm = raw->u8 ? OTTER_NORM_SCALE : OTTER_NORM_NONE;
    const float *mean = NULL, *stdv = NULL;
    if (norm == OTTER_NORM_STANDARD) {
        if (opts->mean || opts->std) {
            if (!opts->mean || !opts->std || opts->num_channels != ds->channels) {
                s = ot_error(OTTER_ERR_ARGUMENT,
                             "%s: standard normalization needs mean and std for each of its %lld channels "
                             "(num_channels is %d)",
                             raw->desc, (long long)ds->channels, opts->num_channels);
                goto fail;
            }
            mean = opts->mean;
            stdv = opts->std;
        } else if (raw->def_mean) {
            mean = raw->def_mean;
            stdv = raw->def_std;
        } else {
            s = ot_error(OTTER_ERR_ARGUMENT, "%s: standard normalization needs mean and std (%lld channels)", raw->desc,
                         (long long)ds->channels);
            goto fail;
        }
        for (int64_t c = 0; c < ds->channels; c++)
            if (!(stdv[c] > 0.0f) || !isfinite(stdv[c]) || !isfinite(mean[c])) {
                s = ot_error(OTTER_ERR_ARGUMENT, "%s: channel %lld: std must be positive and finite (got %g)",
                             raw->desc, (long long)c, (double)stdv[c]);
                goto fail;
            }
    } else if (norm != OTTER_NORM_NONE && norm != OTTER_NORM_SCALE) {
        s = ot_error(OTTER_ERR_ARGUMENT, "%s: unknown normalization %d", raw->desc, (int)norm);
        goto fail;
    }
    if (raw->u8) {
        ds->lut = ot_calloc((size_t)ds->channels * 256, sizeof(float));
        if (!ds->lut) goto nomem;
        for (int64_t c = 0; c < ds->channels; c++)
            for (int v = 0; v < 256; v++) {
                float f = (float)v;
                if (norm == OTTER_NORM_SCALE) f = f / 255.0f;
                if (norm == OTTER_NORM_STANDARD) f = (f / 255.0f - mean[c]) / stdv[c];
                ds->lut[c * 256 + v] = f;
            }
    } else if (norm == OTTER_NORM_SCALE) {
        ds->scale255 = true;
    } else if (norm == OTTER_NORM_STANDARD) {
        ds->mean = ot_calloc((size_t)ds->channels, sizeof(float));
        ds->stdv = ot_calloc((size_t)ds->channels, sizeof(float));
        if (!ds->mean || !ds->stdv) goto nomem;
        memcpy(ds->mean, mean, (size_t)ds->channels * sizeof(float));
        memcpy(ds->stdv, stdv, (size_t)ds->channels * sizeof(float));
    }
    ds->desc = raw->desc;
    ds->x = raw->x;
    ds->labels = raw->labels;
    ds->num_classes = raw->labels ? raw->num_classes : 0;
    ds->targets = raw->targets;
    ds->k = raw->labels ? 1 : raw->k;
    memset(raw, 0, sizeof *raw);
    *out = ds;
    return OTTER_OK;
nomem:
    s = OT_NOMEM();
fail:
    otter_dataset_free(ds);
    ot_data_raw_release(raw);
    return s;
}

/* ---- tensors (npy pairs and memory) ---- */

static bool is_int_dtype(otter_dtype t) {
    switch (t) {
    case OTTER_DTYPE_INT8:
    case OTTER_DTYPE_INT16:
    case OTTER_DTYPE_INT32:
    case OTTER_DTYPE_INT64:
    case OTTER_DTYPE_UINT8:
    case OTTER_DTYPE_UINT16:
    case OTTER_DTYPE_UINT32:
    case OTTER_DTYPE_UINT64:
    case OTTER_DTYPE_BOOL:
        return true;
    default:
        return false;
    }
}

/* Element i of a real-valued tensor as double; false for dtypes that are not plain reals. */
static bool elem_as_double(const otter_tensor *t, int64_t i, double *v) {
    const void *p = t->data;
    switch (t->dtype) {
    case OTTER_DTYPE_FLOAT:
        *v = ((const float *)p)[i];
        return true;
    case OTTER_DTYPE_DOUBLE:
        *v = ((const double *)p)[i];
        return true;
    case OTTER_DTYPE_INT8:
        *v = ((const int8_t *)p)[i];
        return true;
    case OTTER_DTYPE_INT16:
        *v = ((const int16_t *)p)[i];
        return true;
    case OTTER_DTYPE_INT32:
        *v = ((const int32_t *)p)[i];
        return true;
    case OTTER_DTYPE_INT64:
        *v = (double)((const int64_t *)p)[i];
        return true;
    case OTTER_DTYPE_UINT8:
        *v = ((const uint8_t *)p)[i];
        return true;
    case OTTER_DTYPE_UINT16:
        *v = ((const uint16_t *)p)[i];
        return true;
    case OTTER_DTYPE_UINT32:
        *v = ((const uint32_t *)p)[i];
        return true;
    case OTTER_DTYPE_UINT64:
        *v = (double)((const uint64_t *)p)[i];
        return true;
    case OTTER_DTYPE_BOOL:
        *v = ((const uint8_t *)p)[i] ? 1.0 : 0.0;
        return true;
    default:
        return false;
    }
}

static int64_t elem_as_int(const otter_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case OTTER_DTYPE_INT64:
        return ((const int64_t *)p)[i];
    case OTTER_DTYPE_UINT64: {
        uint64_t u = ((const uint64_t *)p)[i];
        return u > (uint64_t)INT64_MAX ? -1 : (int64_t)u;
    }
    default: {
        double d = 0;
        elem_as_double(t, i, &d);
        return (int64_t)d;
    }
    }
}

/* The inputs to raw, last: a float32 or uint8 X that `take` owns gives raw its buffer and keeps a view of
 * it, no copy. */
static otter_status raw_inputs(ot_data_raw *raw, const otter_tensor *X, otter_tensor *take) {
    int64_t n = X->dims[0];
    raw->n = n;
    raw->rank = X->rank - 1;
    for (int i = 1; i < X->rank; i++) raw->dims[i - 1] = X->dims[i];
    int64_t total = n * prod(raw->dims, raw->rank);
    raw->u8 = X->dtype == OTTER_DTYPE_UINT8;
    if (take == X && X->owns_data && total && (raw->u8 || X->dtype == OTTER_DTYPE_FLOAT)) {
        raw->x = X->data;
        take->owns_data = false;
        return OTTER_OK;
    }
    size_t esz = raw->u8 ? 1 : sizeof(float);
    raw->x = ot_malloc(total ? (size_t)total * esz : 1);
    if (!raw->x) return OT_NOMEM();
    if (raw->u8 || X->dtype == OTTER_DTYPE_FLOAT) {
        if (total) memcpy(raw->x, X->data, (size_t)total * esz);
    } else {
        float *f = raw->x;
        for (int64_t i = 0; i < total; i++) {
            double d = 0;
            elem_as_double(X, i, &d);
            f[i] = (float)d;
        }
    }
    return OTTER_OK;
}

/* Inputs and targets to raw. xname/yname name them in messages. The tensors are only read, except that
 * raw may take over take's buffer (take: X or NULL; see raw_inputs). */
static otter_status raw_from_tensors(ot_data_raw *raw, const otter_tensor *X, const char *xname, const otter_tensor *Y,
                                     const char *yname, const otter_dataset_options *opts, otter_tensor *take) {
    if (X->rank < 1)
        return ot_error(OTTER_ERR_INVALID, "%s: inputs must have a sample dimension (rank 0 given)", xname);
    if (Y->rank < 1 || Y->rank > 2)
        return ot_error(OTTER_ERR_INVALID, "%s: targets must be [N] or [N, k] (rank %d given)", yname, Y->rank);
    if (X->dims[0] != Y->dims[0])
        return ot_error(OTTER_ERR_INVALID, "%s has %lld samples but %s has %lld", xname, (long long)X->dims[0], yname,
                        (long long)Y->dims[0]);
    double probe;
    if (!elem_as_double(X, 0, &probe) && X->dtype != OTTER_DTYPE_FLOAT)
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s: inputs of dtype %s are not supported", xname,
                        otter_dtype_name(X->dtype));
    if (!elem_as_double(Y, 0, &probe) && Y->dtype != OTTER_DTYPE_FLOAT)
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s: targets of dtype %s are not supported", yname,
                        otter_dtype_name(Y->dtype));
    int64_t n = X->dims[0], k = Y->rank == 2 ? Y->dims[1] : 1;
    bool want_float =
        opts->targets == OTTER_TARGETS_FLOAT || (opts->targets == OTTER_TARGETS_AUTO && !is_int_dtype(Y->dtype));
    if (want_float) {
        raw->k = k;
        raw->targets = ot_malloc((size_t)(n * k) * sizeof(float) + 1);
        if (!raw->targets) return OT_NOMEM();
        for (int64_t i = 0; i < n * k; i++) {
            double d = 0;
            elem_as_double(Y, i, &d);
            raw->targets[i] = (float)d;
        }
        return raw_inputs(raw, X, take);
    }
    if (k != 1)
        return ot_error(OTTER_ERR_INVALID, "%s: class labels must be [N] or [N, 1] (got [N, %lld])", yname,
                        (long long)k);
    raw->labels = ot_malloc((size_t)n * sizeof(int64_t) + 1);
    if (!raw->labels) return OT_NOMEM();
    int64_t maxl = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t l;
        if (is_int_dtype(Y->dtype)) {
            l = elem_as_int(Y, i);
        } else {
            double d = 0;
            elem_as_double(Y, i, &d);
            if (!(d == floor(d)) || d < 0 || d > 9.0e18)
                return ot_error(OTTER_ERR_INVALID, "%s: element %lld: %g is not a class label (a whole number >= 0)",
                                yname, (long long)i, d);
            l = (int64_t)d;
        }
        if (l < 0 || (opts->num_classes > 0 && l >= opts->num_classes))
            return ot_error(OTTER_ERR_INVALID, "%s: element %lld: label %lld is out of range for %lld classes", yname,
                            (long long)i, (long long)l, (long long)(opts->num_classes > 0 ? opts->num_classes : 0));
        raw->labels[i] = l;
        if (l > maxl) maxl = l;
    }
    raw->num_classes = opts->num_classes > 0 ? opts->num_classes : maxl + 1;
    return raw_inputs(raw, X, take);
}

otter_status otter_dataset_from_tensors(otter_dataset **out, const otter_tensor *inputs, const otter_tensor *targets,
                                        const otter_dataset_options *opts) {
    static const otter_dataset_options defaults = {0};
    if (!out || !inputs || !targets) return ot_error(OTTER_ERR_ARGUMENT, "otter_dataset_from_tensors: NULL argument");
    *out = NULL;
    if (!opts) opts = &defaults;
    ot_data_raw raw = {0};
    otter_status s = raw_from_tensors(&raw, inputs, "inputs", targets, "targets", opts, NULL);
    if (s == OTTER_OK) {
        raw.desc = ot_strdup("tensors");
        if (!raw.desc) s = OT_NOMEM();
    }
    if (s != OTTER_OK) {
        ot_data_raw_release(&raw);
        return s;
    }
    return ot_dataset_finish(out, &raw, opts);
}

/* The npy files of a comma-separated list, loaded as columns (same number of rows each). */
typedef struct npy_columns {
    otter_tensor **t;
    char **files;
    size_t n, cap; /* loaded; allocated (entries past n may hold the one that failed) */
} npy_columns;

static void npy_columns_free(npy_columns *c) {
    for (size_t i = 0; i < c->cap; i++) {
        otter_tensor_free(c->t[i]);
        ot_free(c->files[i]);
    }
    ot_free(c->t);
    ot_free(c->files);
    memset(c, 0, sizeof *c);
}

static otter_status load_npy_columns(npy_columns *c, const char *list) {
    size_t count = 1;
    for (const char *p = list; *p; p++) count += *p == ',';
    c->t = ot_calloc(count, sizeof *c->t);
    c->files = ot_calloc(count, sizeof *c->files);
    if (!c->t || !c->files) return OT_NOMEM();
    c->cap = count;
    for (const char *p = list; c->n < count; c->n++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) return ot_error(OTTER_ERR_ARGUMENT, "npy:%s: file %zu of the list is empty", list, c->n + 1);
        if (!(c->files[c->n] = ot_strndup(p, len))) return OT_NOMEM();
        OT_TRY(otter_tensor_load_npy(&c->t[c->n], c->files[c->n]));
        const otter_tensor *t = c->t[c->n];
        if (t->rank < 1) return ot_error(OTTER_ERR_INVALID, "%s: a scalar has no sample dimension", c->files[c->n]);
        if (t->dims[0] != c->t[0]->dims[0])
            return ot_error(OTTER_ERR_INVALID, "%s has %lld samples but %s has %lld", c->files[0],
                            (long long)c->t[0]->dims[0], c->files[c->n], (long long)t->dims[0]);
        p = end ? end + 1 : p + len;
    }
    return OTTER_OK;
}

/* Let column t view buf, a copy of its bytes the dataset keeps anyway. */
static void share_data(otter_tensor *t, void *buf) {
    if (t->owns_data) ot_free(t->data);
    t->data = buf;
    t->owns_data = false;
}

/* Two columns that are also the inputs and targets hold the same bytes where no conversion took place
 * (float32 or uint8 inputs, int64 labels, float32 targets): one copy, not two. */
static void share_columns(otter_dataset *ds, otter_tensor **t) {
    if (t[0]->owns_data && (t[0]->dtype == OTTER_DTYPE_FLOAT || t[0]->dtype == OTTER_DTYPE_UINT8))
        share_data(t[0], ds->x);
    if (ds->labels && t[1]->dtype == OTTER_DTYPE_INT64) share_data(t[1], ds->labels);
    if (ds->targets && t[1]->dtype == OTTER_DTYPE_FLOAT) share_data(t[1], ds->targets);
}

/* npy:A.npy,B.npy,...: the columns, and with two of them that read as inputs and targets, those as well
 * (two that don't, such as token ids and per-token targets, stay columns only, unless the options ask for
 * targets or a class count). */
static otter_status open_npy(otter_dataset **out, const char *spec, const char *list,
                             const otter_dataset_options *opts) {
    npy_columns c = {0};
    ot_data_raw raw = {0};
    otter_dataset *ds = NULL;
    otter_status s = load_npy_columns(&c, list);
    if (s == OTTER_OK && c.n == 2) {
        s = raw_from_tensors(&raw, c.t[0], c.files[0], c.t[1], c.files[1], opts, c.t[0]);
        if (s == OTTER_OK && !(raw.desc = ot_strdup(spec))) s = OT_NOMEM();
        if (s == OTTER_OK) s = ot_dataset_finish(&ds, &raw, opts);
        bool asked = opts->targets != OTTER_TARGETS_AUTO || opts->num_classes > 0; /* inputs and targets */
        /* Once raw took column 0's buffer (its last step), a failure has freed it: no columns to fall back on. */
        bool taken = !c.t[0]->owns_data && c.t[0]->data;
        if (!asked && !taken && (s == OTTER_ERR_INVALID || s == OTTER_ERR_UNSUPPORTED)) {
            ot_data_raw_release(&raw);
            otter_clear_error();
            s = OTTER_OK;
        }
    }
    if (s == OTTER_OK && !ds) {
        ds = ot_calloc(1, sizeof *ds);
        if (!ds || !(ds->desc = ot_strdup(spec))) s = OT_NOMEM();
        if (ds) ds->n = c.t[0]->dims[0];
        if (s == OTTER_OK && ds->n <= 0) s = ot_error(OTTER_ERR_INVALID, "%s: holds no samples", spec);
    }
    if (s != OTTER_OK) {
        ot_data_raw_release(&raw);
        otter_dataset_free(ds);
        npy_columns_free(&c);
        return s;
    }
    if (ds->x) share_columns(ds, c.t);
    ds->columns = c.t, ds->column_files = c.files, ds->n_columns = c.n;
    *out = ds;
    return OTTER_OK;
}

/* ---- open ---- */

static char *find_first(const char *dir, const char *const *names, int count) {
    for (int i = 0; i < count; i++) {
        char *p = ot_path_join(dir, names[i]);
        if (!p) return NULL;
        if (access(p, F_OK) == 0) return p;
        ot_free(p);
    }
    return NULL;
}

static otter_status open_mnist(ot_data_raw *raw, const char *dir, bool test, int64_t ncls) {
    const char *pre = test ? "t10k" : "train";
    char names[2][3][64];
    const char *img[3], *lab[3];
    for (int i = 0; i < 3; i++) {
        static const char *const img_fmt[3] = {"%s-images-idx3-ubyte", "%s-images-idx3-ubyte.gz",
                                               "%s-images.idx3-ubyte"};
        static const char *const lab_fmt[3] = {"%s-labels-idx1-ubyte", "%s-labels-idx1-ubyte.gz",
                                               "%s-labels.idx1-ubyte"};
        snprintf(names[0][i], sizeof names[0][i], img_fmt[i], pre);
        snprintf(names[1][i], sizeof names[1][i], lab_fmt[i], pre);
        img[i] = names[0][i];
        lab[i] = names[1][i];
    }
    char *ip = find_first(dir, img, 3);
    if (!ip) return ot_error(OTTER_ERR_NOT_FOUND, "mnist: no %s or %s.gz in '%s'", names[0][0], names[0][0], dir);
    char *lp = find_first(dir, lab, 3);
    if (!lp) {
        ot_free(ip);
        return ot_error(OTTER_ERR_NOT_FOUND, "mnist: no %s or %s.gz in '%s'", names[1][0], names[1][0], dir);
    }
    otter_status s = ot_idx_load_pair(raw, ip, lp, ncls);
    ot_free(ip);
    ot_free(lp);
    return s;
}

static otter_status open_cifar(ot_data_raw *raw, const char *path, bool test, int64_t ncls) {
    char *files[5] = {0};
    int nf = 0;
    otter_status s = OTTER_OK;
    if (access(path, F_OK) != 0) return ot_error(OTTER_ERR_NOT_FOUND, "cifar10: '%s' does not exist", path);
    struct stat st;
    bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (!is_dir) {
        files[nf] = ot_strdup(path);
        if (!files[nf++]) return OT_NOMEM();
    } else {
        int count = test ? 1 : 5;
        for (int i = 0; i < count; i++) {
            char a[32], b[32];
            if (test) {
                snprintf(a, sizeof a, "test_batch.bin");
                snprintf(b, sizeof b, "test_batch");
            } else {
                snprintf(a, sizeof a, "data_batch_%d.bin", i + 1);
                snprintf(b, sizeof b, "data_batch_%d", i + 1);
            }
            const char *names[2] = {a, b};
            files[nf] = find_first(path, names, 2);
            if (!files[nf]) {
                s = ot_error(OTTER_ERR_NOT_FOUND, "cifar10: no %s in '%s'", a, path);
                goto done;
            }
            nf++;
        }
    }
    s = ot_cifar10_load(raw, (const char *const *)files, nf, ncls);
done:
    for (int i = 0; i < nf; i++) ot_free(files[i]);
    return s;
}

otter_status otter_dataset_open(otter_dataset **out, const char *spec, const otter_dataset_options *opts) {
    static const otter_dataset_options defaults = {0};
    if (!out || !spec) return ot_error(OTTER_ERR_ARGUMENT, "otter_dataset_open: NULL argument");
    *out = NULL;
    if (!opts) opts = &defaults;
    if (opts->num_classes < 0) return ot_error(OTTER_ERR_ARGUMENT, "data: num_classes must not be negative");
    const char *colon = strchr(spec, ':');
    if (!colon)
        return ot_error(OTTER_ERR_ARGUMENT,
                        "data spec '%s': expected mnist:DIR, fashion-mnist:DIR, idx:IMAGES,LABELS, cifar10:DIR, "
                        "npy:X.npy,Y.npy[,...] or csv:FILE",
                        spec);
    size_t kl = (size_t)(colon - spec);
    const char *arg = colon + 1;
    bool test = opts->split == OTTER_SPLIT_TEST;
    int64_t ncls10 = opts->num_classes > 0 ? opts->num_classes : 10;
    ot_data_raw raw = {0};
    otter_status s;
    const char *split_name = test ? "test" : "train";
    if (*arg == '\0') return ot_error(OTTER_ERR_ARGUMENT, "data spec '%s': nothing after the colon", spec);
#define KIND_IS(k) (kl == strlen(k) && strncmp(spec, k, kl) == 0)
    if (KIND_IS("mnist") || KIND_IS("fashion-mnist")) {
        bool fashion = KIND_IS("fashion-mnist");
        s = open_mnist(&raw, arg, test, ncls10);
        raw.def_mean = fashion ? FASHION_MEAN : MNIST_MEAN;
        raw.def_std = fashion ? FASHION_STD : MNIST_STD;
        raw.desc = ot_sprintf("%s (%s)", spec, split_name);
    } else if (KIND_IS("npy")) {
        return open_npy(out, spec, arg, opts);
    } else if (KIND_IS("idx")) {
        const char *comma = strchr(arg, ',');
        if (!comma || comma == arg || comma[1] == '\0')
            return ot_error(OTTER_ERR_ARGUMENT, "data spec '%s': expected two files separated by a comma", spec);
        char *first = ot_strndup(arg, (size_t)(comma - arg));
        if (!first) return OT_NOMEM();
        s = ot_idx_load_pair(&raw, first, comma + 1, ncls10);
        raw.def_mean = MNIST_MEAN;
        raw.def_std = MNIST_STD;
        ot_free(first);
        raw.desc = ot_strdup(spec);
    } else if (KIND_IS("cifar10")) {
        s = open_cifar(&raw, arg, test, ncls10);
        raw.def_mean = CIFAR_MEAN;
        raw.def_std = CIFAR_STD;
        raw.desc = ot_sprintf("%s (%s)", spec, split_name);
    } else if (KIND_IS("csv")) {
        s = ot_csv_load(&raw, arg, opts);
        raw.desc = ot_strdup(spec);
    } else {
        return ot_error(OTTER_ERR_ARGUMENT,
                        "data spec '%s': unknown kind '%.*s' (mnist, fashion-mnist, idx, cifar10, npy, csv)", spec,
                        (int)kl, spec);
    }
#undef KIND_IS
    if (s == OTTER_OK && !raw.desc) s = OT_NOMEM();
    if (s != OTTER_OK) {
        ot_data_raw_release(&raw);
        return s;
    }
    return ot_dataset_finish(out, &raw, opts);
}

/* ---- accessors ---- */

int64_t otter_dataset_size(const otter_dataset *ds) { return ds ? ds->n : 0; }
int otter_dataset_input_shape(const otter_dataset *ds, int64_t *dims) {
    if (!ds) return 0;
    if (dims) memcpy(dims, ds->dims, sizeof ds->dims);
    return ds->rank;
}
int64_t otter_dataset_input_numel(const otter_dataset *ds) { return ds ? ds->numel : 0; }
int64_t otter_dataset_num_classes(const otter_dataset *ds) { return ds ? ds->num_classes : 0; }
int64_t otter_dataset_target_numel(const otter_dataset *ds) { return ds ? ds->k : 0; }
const int64_t *otter_dataset_labels(const otter_dataset *ds) { return ds ? ds->labels : NULL; }
const char *otter_dataset_description(const otter_dataset *ds) { return ds ? ds->desc : ""; }
size_t otter_dataset_column_count(const otter_dataset *ds) { return ds ? ds->n_columns : 0; }
const otter_tensor *otter_dataset_column(const otter_dataset *ds, size_t i) {
    return ds && i < ds->n_columns ? ds->columns[i] : NULL;
}
const char *otter_dataset_column_file(const otter_dataset *ds, size_t i) {
    return ds && i < ds->n_columns ? ds->column_files[i] : NULL;
}

otter_status otter_dataset_gather_column(const otter_dataset *ds, size_t i, const int64_t *idx, int64_t n,
                                         otter_tensor *out) {
    if (!ds || !out || (n > 0 && !idx) || n < 0)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_dataset_gather_column: bad argument");
    if (i >= ds->n_columns)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: no column %zu (%zu columns)", ds->desc, i, ds->n_columns);
    const otter_tensor *c = ds->columns[i];
    int64_t per = prod(c->dims + 1, c->rank - 1);
    if (out->dtype != c->dtype || out->rank < 1 || prod(out->dims + 1, out->rank - 1) != per || out->dims[0] < n ||
        (n > 0 && !out->data))
        return ot_error(OTTER_ERR_ARGUMENT,
                        "%s: a batch of column %zu (%s) must be %s with %lld elements per sample "
                        "and room for %lld samples",
                        ds->desc, i, ds->column_files[i], otter_dtype_name(c->dtype), (long long)per, (long long)n);
    size_t row = (size_t)per * otter_dtype_size(c->dtype);
    for (int64_t r = 0; r < n; r++) {
        if (idx[r] < 0 || idx[r] >= ds->n)
            return ot_error(OTTER_ERR_ARGUMENT, "%s: sample index %lld is out of range (%lld samples)", ds->desc,
                            (long long)idx[r], (long long)ds->n);
        memcpy((char *)out->data + (size_t)r * row, (const char *)c->data + (size_t)idx[r] * row, row);
    }
    return OTTER_OK;
}

/* ---- gather ---- */

static void convert_row(const otter_dataset *ds, int64_t i, float *dst) {
    int64_t numel = ds->numel, cb = ds->chan_block;
    if (ds->u8) {
        const uint8_t *src = (const uint8_t *)ds->x + i * numel;
        for (int64_t c = 0; c < ds->channels; c++) {
            const float *lut = ds->lut + c * 256;
            for (int64_t j = c * cb; j < (c + 1) * cb; j++) dst[j] = lut[src[j]];
        }
        return;
    }
    const float *src = (const float *)ds->x + i * numel;
    if (ds->mean) {
        for (int64_t c = 0; c < ds->channels; c++) {
            float m = ds->mean[c], sd = ds->stdv[c];
            for (int64_t j = c * cb; j < (c + 1) * cb; j++) dst[j] = (src[j] - m) / sd;
        }
    } else if (ds->scale255) {
        for (int64_t j = 0; j < numel; j++) dst[j] = src[j] / 255.0f;
    } else {
        memcpy(dst, src, (size_t)numel * sizeof(float));
    }
}

/* Check a batch tensor: dtype, per-sample element count, room for cap rows. */
otter_status ot_data_check_batch(const otter_dataset *ds, const otter_tensor *inputs, const otter_tensor *targets,
                                 int64_t cap) {
    if (!ds->x && (inputs || targets))
        return ot_error(OTTER_ERR_ARGUMENT, "%s: %zu arrays, not inputs and targets: gather them column by column",
                        ds->desc, ds->n_columns);
    if (inputs) {
        if (inputs->dtype != OTTER_DTYPE_FLOAT || inputs->rank < 1)
            return ot_error(OTTER_ERR_ARGUMENT, "%s: batch inputs must be a float tensor [B, ...] (got %s of rank %d)",
                            ds->desc, otter_dtype_name(inputs->dtype), inputs->rank);
        int64_t per = prod(inputs->dims + 1, inputs->rank - 1);
        if (per != ds->numel)
            return ot_error(OTTER_ERR_ARGUMENT,
                            "%s: batch inputs hold %lld elements per sample, the dataset's samples have %lld", ds->desc,
                            (long long)per, (long long)ds->numel);
        if (cap > 0 && !inputs->data) return ot_error(OTTER_ERR_ARGUMENT, "%s: batch inputs have no data", ds->desc);
    }
    if (targets) {
        if (ds->labels) {
            if ((targets->dtype != OTTER_DTYPE_INT64 && targets->dtype != OTTER_DTYPE_INT32) || targets->rank < 1 ||
                prod(targets->dims + 1, targets->rank - 1) != 1)
                return ot_error(OTTER_ERR_ARGUMENT, "%s: batch labels must be int64 or int32 [B] (got %s of rank %d)",
                                ds->desc, otter_dtype_name(targets->dtype), targets->rank);
        } else if (targets->dtype != OTTER_DTYPE_FLOAT || targets->rank < 1 ||
                   prod(targets->dims + 1, targets->rank - 1) != ds->k) {
            return ot_error(OTTER_ERR_ARGUMENT, "%s: batch targets must be float [B, %lld]", ds->desc,
                            (long long)ds->k);
        }
        if (cap > 0 && !targets->data) return ot_error(OTTER_ERR_ARGUMENT, "%s: batch targets have no data", ds->desc);
    }
    return OTTER_OK;
}

/* Rows without checks (done by the caller). */
otter_status ot_data_gather_rows(const otter_dataset *ds, const int64_t *idx, int64_t n, otter_tensor *inputs,
                                 otter_tensor *targets) {
    for (int64_t r = 0; r < n; r++)
        if (idx[r] < 0 || idx[r] >= ds->n)
            return ot_error(OTTER_ERR_ARGUMENT, "%s: sample index %lld is out of range (%lld samples)", ds->desc,
                            (long long)idx[r], (long long)ds->n);
    for (int64_t r = 0; r < n; r++) {
        int64_t i = idx[r];
        if (inputs) convert_row(ds, i, (float *)inputs->data + r * ds->numel);
        if (!targets) continue;
        if (ds->labels) {
            if (targets->dtype == OTTER_DTYPE_INT64)
                ((int64_t *)targets->data)[r] = ds->labels[i];
            else
                ((int32_t *)targets->data)[r] = (int32_t)ds->labels[i];
        } else {
            memcpy((float *)targets->data + r * ds->k, ds->targets + i * ds->k, (size_t)ds->k * sizeof(float));
        }
    }
    return OTTER_OK;
}

otter_status otter_dataset_gather(const otter_dataset *ds, const int64_t *idx, int64_t n, otter_tensor *inputs,
                                  otter_tensor *targets) {
    if (!ds || (n > 0 && !idx) || n < 0) return ot_error(OTTER_ERR_ARGUMENT, "otter_dataset_gather: bad argument");
    OT_TRY(ot_data_check_batch(ds, inputs, targets, n));
    if (inputs && inputs->dims[0] < n)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: batch inputs have room for %lld samples, %lld asked", ds->desc,
                        (long long)inputs->dims[0], (long long)n);
    if (targets && targets->dims[0] < n)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: batch targets have room for %lld samples, %lld asked", ds->desc,
                        (long long)targets->dims[0], (long long)n);
    return ot_data_gather_rows(ds, idx, n, inputs, targets);
}
