/* otter's checker against onnx.checker.check_model on every model.onnx under
 * /usr/share/libonnx-testdata/data and on the broken-model corpus (tests/data/broken, made by
 * tools/make_broken_models.py), in both modes: full_check=True (otter: .full_check = true) and
 * the structural check alone (full_check=False).
 *
 * Verdicts are valid/invalid (a model otter cannot load counts as invalid). Known differences are
 * listed with their reason in tests/checker_differences.txt; the test fails on a difference that
 * is not listed, and on a listed model that differs in neither mode (so the list stays true). */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>

#include "otter/check.h"
#include "otter/io.h"
#include "testutil.h"

#define TESTDATA   "/usr/share/libonnx-testdata/data"
#define MAX_MODELS 4096

typedef struct entry {
    char *path;                       /* absolute */
    char *label;                      /* "node/test_abs/model.onnx", "broken/cycle.onnx" */
    int onnx_valid, onnx_basic_valid; /* full_check=True / False; -1: no verdict */
    char *onnx_msg;
    int otter_valid, otter_basic_valid;
    char *otter_msg;
    int listed;
} entry;

static entry models[MAX_MODELS];
static size_t n_models;

static void add_model(const char *path, const char *label) {
    if (n_models == MAX_MODELS) {
        fprintf(stderr, "too many models\n");
        exit(1);
    }
    models[n_models].path = strdup(path);
    models[n_models].label = strdup(label);
    models[n_models].onnx_valid = -1;
    models[n_models].onnx_basic_valid = -1;
    n_models++;
}

static int visit(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    size_t n = strlen(path);
    if (flag == FTW_F && n >= 11 && strcmp(path + n - 11, "/model.onnx") == 0)
        add_model(path, path + strlen(TESTDATA) + 1);
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const entry *)a)->label, ((const entry *)b)->label);
}

/* Run python3-onnx's checker on every model, one line per model: "<index> <basic> <full> <message>"
 * with ok/fail verdicts for full_check=False and True, and the full check's message. */
static const char *PY = "import sys, onnx\n"
                        "def check(m, full):\n"
                        "    try:\n"
                        "        onnx.checker.check_model(m, full_check=full)\n"
                        "        return 'ok', ''\n"
                        "    except Exception as e:\n"
                        "        return 'fail', type(e).__name__ + ': ' + ' '.join(str(e).split())[:300]\n"
                        "for line in open(sys.argv[1]):\n"
                        "    i, path = line.rstrip('\\n').split('\\t', 1)\n"
                        "    m = onnx.load(path)\n"
                        "    b, _ = check(m, False)\n"
                        "    f, msg = check(m, True)\n"
                        "    print(i, b, f, msg, flush=True)\n";

static int run_onnx(void) {
    char list[4096], script[4096], cmd[9000];
    snprintf(list, sizeof list, "%s", tu_tmp_path("checker_agreement_models.txt"));
    snprintf(script, sizeof script, "%s", tu_tmp_path("checker_agreement.py"));
    FILE *f = fopen(list, "w");
    FILE *s = fopen(script, "w");
    if (!f || !s) return -1;
    for (size_t i = 0; i < n_models; i++) fprintf(f, "%zu\t%s\n", i, models[i].path);
    fputs(PY, s);
    fclose(f);
    fclose(s);
    snprintf(cmd, sizeof cmd, "%s %s %s 2>/dev/null", OTTER_PYTHON, script, list);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[8192];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        size_t i = strtoul(line, NULL, 10);
        if (i >= n_models) continue;
        char basic[8] = "", full[8] = "";
        int off = 0;
        if (sscanf(sp + 1, "%7s %7s %n", basic, full, &off) < 2) continue;
        models[i].onnx_basic_valid = strcmp(basic, "ok") == 0;
        models[i].onnx_valid = strcmp(full, "ok") == 0;
        if (!models[i].onnx_valid) models[i].onnx_msg = strdup(sp + 1 + off);
    }
    return pclose(p) == 0 ? 0 : -1;
}

static void run_otter(entry *e) {
    otter_model *m = NULL;
    otter_status s = otter_model_load(&m, e->path);
    if (s != OTTER_OK) {
        e->otter_valid = e->otter_basic_valid = 0;
        char buf[600];
        snprintf(buf, sizeof buf, "load: %s", otter_last_error());
        e->otter_msg = strdup(buf);
        return;
    }
    otter_check_options o = {.full_check = false};
    s = otter_model_check(m, &o);
    e->otter_basic_valid = s == OTTER_OK;
    if (s != OTTER_OK && s != OTTER_ERR_INVALID)
        fprintf(stderr, "%s: check failed with %s: %s\n", e->label, otter_status_name(s), otter_last_error());
    o.full_check = true;
    s = otter_model_check(m, &o);
    e->otter_valid = s == OTTER_OK;
    if (s != OTTER_OK) e->otter_msg = strdup(otter_last_error());
    if (s != OTTER_OK && s != OTTER_ERR_INVALID)
        fprintf(stderr, "%s: check failed with %s: %s\n", e->label, otter_status_name(s), otter_last_error());
    otter_model_free(m);
}

/* tests/checker_differences.txt: "<label> <reason...>" per line; '#' comments and blank lines. */
static int load_differences(void) {
    FILE *f = fopen(tu_src_path("tests/checker_differences.txt"), "r");
    if (!f) {
        fprintf(stderr, "cannot open tests/checker_differences.txt\n");
        return -1;
    }
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\0') continue;
        char *end = p + strcspn(p, " \t");
        int has_reason = *end != '\0';
        *end = '\0';
        entry key = {.label = p};
        entry *e = bsearch(&key, models, n_models, sizeof *models, cmp_entry);
        if (!e) {
            fprintf(stderr, "checker_differences.txt lists '%s', which is not in the corpus\n", p);
            tu_failures++;
            continue;
        }
        if (!has_reason) {
            fprintf(stderr, "checker_differences.txt: '%s' has no reason\n", p);
            tu_failures++;
        }
        e->listed = 1;
        n++;
    }
    fclose(f);
    return n;
}

int main(void) {
    nftw(TESTDATA, visit, 16, FTW_PHYS);
    size_t n_testdata = n_models;
    char broken[4096];
    snprintf(broken, sizeof broken, "%s", tu_src_path("tests/data/broken"));
    DIR *d = opendir(broken);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t n = strlen(de->d_name);
            if (n < 5 || strcmp(de->d_name + n - 5, ".onnx") != 0) continue;
            char path[8192], label[4096];
            snprintf(path, sizeof path, "%s/%s", broken, de->d_name);
            snprintf(label, sizeof label, "broken/%s", de->d_name);
            add_model(path, label);
        }
        closedir(d);
    }
    size_t n_broken = n_models - n_testdata;
    printf("corpus: %zu models from %s, %zu from tests/data/broken\n", n_testdata, TESTDATA, n_broken);
    CHECK(n_testdata >= 1000);
    CHECK(n_broken >= 40);
    qsort(models, n_models, sizeof *models, cmp_entry);

    CHECK(run_onnx() == 0);
    int n_listed = load_differences();
    CHECK(n_listed >= 0);

    size_t agree = 0, agree_valid = 0, agree_invalid = 0, basic_agree = 0, differ_listed = 0, differ_unlisted = 0,
           stale = 0;
    for (size_t i = 0; i < n_models; i++) {
        entry *e = &models[i];
        run_otter(e);
        if (e->onnx_valid < 0 || e->onnx_basic_valid < 0) {
            printf("NO ONNX VERDICT %s\n", e->label);
            tu_failures++;
            continue;
        }
        tu_checks += 2;
        int differ_full = e->onnx_valid != e->otter_valid;
        int differ_basic = e->onnx_basic_valid != e->otter_basic_valid;
        if (!differ_full) {
            agree++;
            if (e->onnx_valid)
                agree_valid++;
            else
                agree_invalid++;
        }
        if (!differ_basic) basic_agree++;
        if ((differ_full || differ_basic) && e->listed) {
            differ_listed++;
            printf("known difference %s: full check onnx %s, otter %s; structural check onnx %s, otter %s\n", e->label,
                   e->onnx_valid ? "valid" : "invalid", e->otter_valid ? "valid" : "invalid",
                   e->onnx_basic_valid ? "valid" : "invalid", e->otter_basic_valid ? "valid" : "invalid");
        } else if (differ_full || differ_basic) {
            differ_unlisted++;
            tu_failures++;
            printf("DIFFERENCE %s (%s): onnx %s%s%s; otter %s%s%s\n", e->label,
                   differ_full && differ_basic ? "both checks"
                   : differ_full               ? "full check"
                                               : "structural check",
                   e->onnx_valid ? "valid" : "invalid", e->onnx_msg ? ": " : "", e->onnx_msg ? e->onnx_msg : "",
                   e->otter_valid ? "valid" : "invalid", e->otter_msg ? ": " : "", e->otter_msg ? e->otter_msg : "");
        } else if (e->listed) {
            stale++;
            tu_failures++;
            printf("STALE listed difference %s: both say %s now; remove it from checker_differences.txt\n", e->label,
                   e->onnx_valid ? "valid" : "invalid");
        }
        if (getenv("OTTER_VERBOSE") && !differ_full)
            printf("agree %s: %s%s%s\n", e->label, e->onnx_valid ? "valid" : "invalid", e->otter_msg ? ": " : "",
                   e->otter_msg ? e->otter_msg : "");
    }
    printf("compared %zu models: full check: %zu agree (%zu valid, %zu invalid); structural check: %zu agree; "
           "%zu listed differences, %zu unlisted differences, %zu stale list entries\n",
           n_models, agree, agree_valid, agree_invalid, basic_agree, differ_listed, differ_unlisted, stale);
    for (size_t i = 0; i < n_models; i++) {
        free(models[i].path);
        free(models[i].label);
        free(models[i].onnx_msg);
        free(models[i].otter_msg);
    }
    return tu_finish("test_checker_agreement");
}
