/* Model round trip over the whole libonnx-testdata corpus (ONNX 1.12) and ONNX 1.23's backend suite
 * (../shared/onnx-1.23/backend, IR 3-13): every model.onnx is loaded with
 * otter_model_load, saved with otter_model_save_to_memory, and python3-onnx checks that the copy
 * decodes to a ModelProto equal to the original (unknown fields included; tests/pb_reference.py). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

#define CORPUS      "/usr/share/libonnx-testdata/data"
#define CORPUS_1_23 "/../shared/onnx-1.23/backend"

typedef struct {
    char **paths;
    size_t n, cap;
} path_list;

static void find_models(const char *dir, path_list *out) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        snprintf(p, n, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            find_models(p, out);
            free(p);
        } else if (strcmp(e->d_name, "model.onnx") == 0) {
            if (out->n == out->cap) {
                out->cap = out->cap ? out->cap * 2 : 256;
                out->paths = realloc(out->paths, out->cap * sizeof *out->paths);
            }
            out->paths[out->n++] = p;
        } else {
            free(p);
        }
    }
    closedir(d);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    path_list models = {0};
    find_models(CORPUS, &models);
    size_t n_old = models.n;
    find_models(OTTER_SOURCE_DIR CORPUS_1_23, &models);
    qsort(models.paths, models.n, sizeof *models.paths, cmp_str);
    printf("%zu model.onnx files under %s, %zu under %s\n", n_old, CORPUS, models.n - n_old, CORPUS_1_23);
    CHECK(n_old > 1000 && models.n - n_old > 1802);

    char dir[4096], list[4096];
    snprintf(dir, sizeof dir, "%s", tu_tmp_path("roundtrip"));
    mkdir(dir, 0755);
    snprintf(list, sizeof list, "%s", tu_tmp_path("roundtrip_pairs.tsv"));
    FILE *lf = fopen(list, "w");
    CHECK(lf != NULL);
    if (!lf) return tu_finish("test_roundtrip");
    size_t loaded = 0, saved = 0, identical = 0;
    for (size_t i = 0; i < models.n; i++) {
        const char *path = models.paths[i];
        otter_model *m = NULL;
        otter_status s = otter_model_load(&m, path);
        if (s != OTTER_OK) {
            CHECK_OK(s);
            fprintf(stderr, "  load %s: %s\n", path, otter_last_error());
            continue;
        }
        loaded++;
        void *buf = NULL;
        size_t n = 0;
        s = otter_model_save_to_memory(m, &buf, &n);
        otter_model_free(m);
        if (s != OTTER_OK) {
            CHECK_OK(s);
            fprintf(stderr, "  save %s: %s\n", path, otter_last_error());
            continue;
        }
        saved++;
        char out[4200];
        snprintf(out, sizeof out, "%s/%04zu.onnx", dir, i);
        FILE *f = fopen(out, "wb");
        CHECK(f && fwrite(buf, 1, n, f) == n);
        if (f) fclose(f);
        /* byte-identical is not required (protobuf encodings may differ), only counted */
        FILE *orig = fopen(path, "rb");
        if (orig) {
            char *ob = malloc(n + 1);
            size_t got = fread(ob, 1, n + 1, orig);
            identical += got == n && memcmp(ob, buf, n) == 0;
            free(ob);
            fclose(orig);
        }
        otter_free(buf);
        fprintf(lf, "%s\t%s\n", path, out);
    }
    fclose(lf);
    printf("loaded %zu of %zu, saved %zu, %zu byte-identical to the original\n", loaded, models.n, saved, identical);
    CHECK(loaded == models.n && saved == models.n);

    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/pb_reference.py' compare-models '%s'", OTTER_PYTHON, OTTER_SOURCE_DIR,
             list);
    fflush(stdout);
    int rc = system(cmd);
    CHECK(rc == 0);

    /* Negative control: a copy with one metadata entry added must be reported as different. */
    otter_model *m = NULL;
    CHECK_OK(otter_model_load(&m, models.paths[0]));
    if (m) {
        CHECK_OK(otter_model_set_metadata(m, "control", "added by test_roundtrip"));
        CHECK_OK(otter_model_save(m, tu_tmp_path("control.onnx"), NULL));
        otter_model_free(m);
        char ctl[4096];
        snprintf(ctl, sizeof ctl, "%s", tu_tmp_path("control_pairs.tsv"));
        FILE *cf = fopen(ctl, "w");
        fprintf(cf, "%s\t%s\n", models.paths[0], tu_tmp_path("control.onnx"));
        fclose(cf);
        char ctl_out[4096];
        snprintf(ctl_out, sizeof ctl_out, "%s", tu_tmp_path("control.out"));
        snprintf(cmd, sizeof cmd, "'%s' '%s/tests/pb_reference.py' compare-models '%s' >'%s' 2>&1", OTTER_PYTHON,
                 OTTER_SOURCE_DIR, ctl, ctl_out);
        fflush(stdout);
        rc = system(cmd);
        char said[1024] = "";
        FILE *of = fopen(ctl_out, "r");
        if (of) {
            size_t got = fread(said, 1, sizeof said - 1, of);
            said[got] = '\0';
            fclose(of);
        }
        rc = rc != 0 && strstr(said, "DIFFERS:") && strstr(said, "metadata_props present only in copy");
        CHECK(rc);
        printf("negative control (a metadata entry added): the comparison %s\n", rc != 0 ? "reports it" : "MISSED IT");
    }
    for (size_t i = 0; i < models.n; i++) free(models.paths[i]);
    free(models.paths);
    return tu_finish("test_roundtrip");
}
