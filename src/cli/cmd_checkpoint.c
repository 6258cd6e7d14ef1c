/* otter checkpoint info|dump|convert CKPT: ORT training checkpoints (flatbuffer "ODTC"). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "otter/checkpoint.h"

static void shape_text(const otter_tensor *t, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->rank && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

static size_t tensor_bytes(const otter_tensor *t) {
    if (t->dtype != OTTER_DTYPE_STRING) return otter_tensor_nbytes(t);
    size_t n = 0;
    const otter_bytes *s = t->data;
    for (int64_t i = 0; s && i < otter_tensor_numel(t); i++) n += s[i].len;
    return n;
}

static void print_tensor(const char *indent, const otter_tensor *t) {
    char sh[256];
    shape_text(t, sh, sizeof sh);
    printf("%s%-32s %-9s %-16s %zu bytes%s\n", indent, t->name, otter_dtype_name(t->dtype), sh, tensor_bytes(t),
           t->data || otter_tensor_numel(t) == 0 ? "" : " (no values: nominal)");
}

static int info(const otter_checkpoint *c, const char *path) {
    printf("checkpoint: %s\n", path);
    printf("version: %d\n", otter_checkpoint_version(c));
    printf("nominal state: %s\n", otter_checkpoint_is_nominal(c) ? "yes (shapes and types only)" : "no");
    static const char *kinds[2] = {"trainable parameters", "frozen parameters"};
    for (int k = 0; k < 2; k++) {
        size_t n = otter_checkpoint_param_count(c, k), bytes = 0;
        int64_t elems = 0;
        for (size_t i = 0; i < n; i++) {
            elems += otter_tensor_numel(otter_checkpoint_param_at(c, k, i));
            bytes += otter_tensor_nbytes(otter_checkpoint_param_at(c, k, i));
        }
        printf("%s: %zu (%" PRId64 " elements, %zu bytes)\n", kinds[k], n, elems, bytes);
        for (size_t i = 0; i < n; i++) print_tensor("  ", otter_checkpoint_param_at(c, k, i));
    }
    size_t ng = otter_checkpoint_group_count(c);
    printf("optimizer groups: %zu\n", ng);
    for (size_t g = 0; g < ng; g++) {
        const otter_optimizer_group *gr = otter_checkpoint_group_at(c, g);
        printf("  %s: step %" PRId64 ", initial learning rate %.9g, %zu parameter states\n", gr->name, gr->step,
               (double)gr->initial_learning_rate, gr->n_states);
        for (size_t j = 0; j < gr->n_states; j++) {
            printf("    %s:\n", gr->states[j].param_name);
            for (size_t m = 0; m < gr->states[j].n_momentums; m++) print_tensor("      ", gr->states[j].momentums[m]);
        }
    }
    size_t np = otter_checkpoint_property_count(c);
    printf("properties: %zu\n", np);
    for (size_t i = 0; i < np; i++) {
        const otter_property *p = otter_checkpoint_property_at(c, i);
        if (p->type == OTTER_PROPERTY_INT)
            printf("  %s (int64) = %" PRId64 "\n", p->name, p->i);
        else if (p->type == OTTER_PROPERTY_FLOAT)
            printf("  %s (float) = %.9g\n", p->name, (double)p->f);
        else
            printf("  %s (string) = \"%s\"\n", p->name, p->s);
    }
    return CLI_EXIT_OK;
}

/* ---- dump ---- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

typedef struct dumper {
    const char *dir;
    FILE *manifest;
    char **files; /* file names used so far (to keep them unique) */
    size_t n_files;
    size_t n_written, n_entries;
    bool failed;
} dumper;

/* A file name from key: [A-Za-z0-9._-] kept, others '_', unique in the folder. */
static char *file_name(dumper *d, const char *key) {
    size_t n = strlen(key);
    char *base = malloc(n + 1);
    if (!base) return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = key[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                  ch == '-' || ch == '_';
        base[i] = ok ? ch : '_';
    }
    base[n] = '\0';
    if (n == 0 || base[0] == '.') base[0] = '_';
    char *name = malloc(n + 32);
    if (!name) {
        free(base);
        return NULL;
    }
    for (int k = 1;; k++) {
        if (k == 1)
            snprintf(name, n + 32, "%s.npy", base);
        else
            snprintf(name, n + 32, "%s_%d.npy", base, k);
        bool used = false;
        for (size_t i = 0; i < d->n_files && !used; i++) used = strcmp(d->files[i], name) == 0;
        if (!used) break;
    }
    free(base);
    char **v = realloc(d->files, (d->n_files + 1) * sizeof *v);
    if (!v) {
        free(name);
        return NULL;
    }
    d->files = v;
    v[d->n_files++] = name;
    return name;
}

static void dump_tensor(dumper *d, const char *key, const otter_tensor *t, const char *kind) {
    if (d->failed) return;
    char *file = NULL;
    bool values = t->data || otter_tensor_numel(t) == 0;
    if (values) {
        file = file_name(d, key);
        char *path = file ? malloc(strlen(d->dir) + strlen(file) + 2) : NULL;
        if (!path) {
            fprintf(stderr, "otter checkpoint: out of memory\n");
            d->failed = true;
            return;
        }
        sprintf(path, "%s/%s", d->dir, file);
        if (otter_tensor_save_npy(t, path) != OTTER_OK) {
            fprintf(stderr, "otter checkpoint: tensor '%s' -> %s: %s\n", key, path, otter_last_error());
            d->failed = true;
        }
        free(path);
        d->n_written++;
    }
    fprintf(d->manifest, "%s\n  ", d->n_entries++ ? "," : "");
    json_string(d->manifest, key);
    fputs(": {\"file\": ", d->manifest);
    if (file)
        json_string(d->manifest, file);
    else
        fputs("null", d->manifest);
    fprintf(d->manifest, ", \"dtype\": \"%s\", \"shape\": [", otter_dtype_name(t->dtype));
    for (int i = 0; i < t->rank; i++) fprintf(d->manifest, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    fprintf(d->manifest, "], \"kind\": \"%s\"}", kind);
}

static int dump(const otter_checkpoint *c, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "otter checkpoint: cannot create '%s': %s\n", dir, strerror(errno));
        return CLI_EXIT_INVALID;
    }
    char *mpath = malloc(strlen(dir) + 32);
    /* the manifest is built in memory and written in one atomic step, after every .npy file */
    char *text = NULL;
    size_t text_len = 0;
    dumper d = {dir, mpath ? open_memstream(&text, &text_len) : NULL, NULL, 0, 0, 0, false};
    if (!d.manifest) {
        fprintf(stderr, "otter checkpoint: out of memory\n");
        free(mpath);
        return CLI_EXIT_INVALID;
    }
    sprintf(mpath, "%s/manifest.json", dir);
    fputc('{', d.manifest);
    static const char *kinds[2] = {"trainable", "frozen"};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < otter_checkpoint_param_count(c, k); i++) {
            const otter_tensor *t = otter_checkpoint_param_at(c, k, i);
            dump_tensor(&d, t->name, t, kinds[k]);
        }
    for (size_t g = 0; g < otter_checkpoint_group_count(c); g++) {
        const otter_optimizer_group *gr = otter_checkpoint_group_at(c, g);
        for (size_t j = 0; j < gr->n_states; j++)
            for (size_t m = 0; m < gr->states[j].n_momentums; m++) {
                const otter_tensor *t = gr->states[j].momentums[m];
                size_t len = strlen(gr->name) + strlen(gr->states[j].param_name) + strlen(t->name) + 3;
                char *key = malloc(len);
                if (!key) {
                    d.failed = true;
                    break;
                }
                snprintf(key, len, "%s/%s/%s", gr->name, gr->states[j].param_name, t->name);
                dump_tensor(&d, key, t, "optimizer_state");
                free(key);
            }
    }
    fputs(d.n_entries ? "\n}\n" : "}\n", d.manifest);
    bool ok = !d.failed && !ferror(d.manifest);
    if (fclose(d.manifest) != 0) ok = false;
    if (ok && otter_write_file_atomic(mpath, text, text_len) != OTTER_OK) {
        fprintf(stderr, "otter checkpoint: %s\n", otter_last_error());
        ok = false;
    }
    if (ok)
        printf("%zu tensors: %zu .npy files and %s%s\n", d.n_entries, d.n_written, mpath,
               d.n_written < d.n_entries ? " (nominal tensors have no values: \"file\": null)" : "");
    for (size_t i = 0; i < d.n_files; i++) free(d.files[i]);
    free(d.files);
    free(mpath);
    free(text);
    return ok ? CLI_EXIT_OK : CLI_EXIT_INVALID;
}

int cmd_checkpoint(int argc, char **argv) {
    const char *npy_dir = NULL, *out = NULL, *version = NULL;
    bool keep_order = false, no_opt = false, nominal = false;
    const cli_opt opts[] = {
        {"--npy-dir", NULL, "DIR", "dump: folder for the .npy files and manifest.json (created if needed)", &npy_dir,
         NULL},
        {"--output", "-o", "OUT", "convert: where to write the checkpoint", &out, NULL},
        {"--keep-order", NULL, NULL, "convert: keep the order read (default: sorted by name, as ORT writes)", NULL,
         &keep_order},
        {"--version", NULL, "N", "convert: checkpoint version to write, 1 or 2 (default 2)", &version, NULL},
        {"--no-optimizer-state", NULL, NULL, "convert: leave the optimizer groups out", NULL, &no_opt},
        {"--nominal", NULL, NULL, "convert: write a nominal checkpoint (shapes and types, no values)", NULL, &nominal},
        {0}};
    const cli_spec spec = {
        "checkpoint",
        "info|dump|convert CKPT",
        "ONNX Runtime training checkpoints (flatbuffer \"ODTC\", versions 1 and 2).\n"
        "  info CKPT                     version, parameters (name, dtype, shape, bytes), optimizer groups and\n"
        "                                their momentums, properties\n"
        "  dump CKPT --npy-dir DIR       one .npy per tensor and DIR/manifest.json: {name: {file, dtype, shape,\n"
        "                                kind}}; momentums are named GROUP/PARAM/MOMENTUM\n"
        "  convert CKPT -o OUT           re-write (version 2, sorted by name) with the options below",
        2,
        2,
        opts};
    const char *pos[2];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    const char *sub = pos[0], *path = pos[1];
    bool is_info = strcmp(sub, "info") == 0, is_dump = strcmp(sub, "dump") == 0,
         is_convert = strcmp(sub, "convert") == 0;
    if (!is_info && !is_dump && !is_convert)
        return cli_usage_error(&spec, "unknown sub-command '%s' (info, dump or convert)", sub);
    if (is_dump && !npy_dir) return cli_usage_error(&spec, "dump needs --npy-dir DIR");
    if (!is_dump && npy_dir) return cli_usage_error(&spec, "--npy-dir is for dump");
    if (is_convert && !out) return cli_usage_error(&spec, "convert needs --output OUT");
    if (!is_convert && (out || keep_order || version || no_opt || nominal))
        return cli_usage_error(&spec, "--output, --keep-order, --version, --no-optimizer-state and --nominal are "
                                      "for convert");
    otter_checkpoint_save_options so = {0, keep_order, no_opt};
    if (version) {
        char *end;
        long v = strtol(version, &end, 10);
        if (*end || (v != 1 && v != 2)) return cli_usage_error(&spec, "--version must be 1 or 2, not '%s'", version);
        so.version = (int)v;
    }
    otter_checkpoint *c = NULL;
    if (otter_checkpoint_load(&c, path) != OTTER_OK) return cli_fail("checkpoint", path);
    if (is_info)
        rc = info(c, path);
    else if (is_dump)
        rc = dump(c, npy_dir);
    else {
        rc = CLI_EXIT_OK;
        if (nominal && otter_checkpoint_set_nominal(c, true) != OTTER_OK)
            rc = cli_fail("checkpoint", path);
        else if (otter_checkpoint_save(c, out, &so) != OTTER_OK)
            rc = cli_fail("checkpoint", out);
        else
            printf("%s -> %s (version %d%s%s%s)\n", path, out, so.version ? so.version : OTTER_CHECKPOINT_VERSION,
                   keep_order ? ", order kept" : ", sorted by name", no_opt ? ", no optimizer state" : "",
                   nominal ? ", nominal" : "");
    }
    otter_checkpoint_free(c);
    return rc;
}
