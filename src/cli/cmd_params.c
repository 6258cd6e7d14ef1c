/* otter params DIR [--checkpoint CKPT] [--all] [--shapes-json FILE]: the contiguous parameter buffer's
 * layout, and FLAT's shapes.json ([{"name", "shape"}] in buffer order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "otter/training.h"

static bool json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
    return !ferror(f);
}

int cmd_params(int argc, char **argv) {
    const char *json = NULL, *ckpt = NULL, *prefix = NULL;
    bool all = false;
    const cli_opt opts[] = {
        {"--shapes-json", NULL, "FILE", "write [{\"name\", \"shape\"}] in buffer order", &json, NULL},
        {"--checkpoint", NULL, "CKPT", "checkpoint (default: DIR/checkpoint)", &ckpt, NULL},
        {"--all", NULL, NULL, "include frozen parameters (the trainable_only = false buffer)", NULL, &all},
        {"--prefix", NULL, "P", "artifact file name prefix", &prefix, NULL},
        {0}};
    const cli_spec spec = {"params",
                           "DIR",
                           "List the parameters in the order of the contiguous buffer (ORT's CopyParametersToBuffer:\n"
                           "the training graph's parameter inputs, trainable ones unless --all) with offsets and\n"
                           "shapes; --shapes-json writes them as FLAT's shapes.json.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    rc = CLI_EXIT_OK;
    otter_training_session *s = NULL;
    if (otter_training_session_create_from_dir(&s, pos[0], prefix, ckpt, &(otter_training_options){.n_threads = 1}) !=
        OTTER_OK)
        return cli_fail("params", pos[0]);
    /* shapes.json is built in memory and written in one atomic step */
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = NULL;
    if (json) {
        if (!(f = open_memstream(&text, &text_len))) {
            fprintf(stderr, "otter params: out of memory\n");
            otter_training_session_free(s);
            return CLI_EXIT_INVALID;
        }
        fputc('[', f);
    }
    size_t listed = 0;
    for (size_t i = 0; i < otter_training_param_count(s); i++) {
        const char *name = otter_training_param_name(s, i);
        otter_param_info in;
        if (otter_training_describe_param(s, name, &in) != OTTER_OK) continue;
        size_t off = all ? in.offset_all : in.offset_trainable;
        if (off == SIZE_MAX) continue;
        long long numel = 1;
        printf("%-32s %-8s [", name, in.trainable ? "train" : "frozen");
        if (f) {
            fputs(listed ? ", {\"name\": " : "{\"name\": ", f);
            json_string(f, name);
            fputs(", \"shape\": [", f);
        }
        for (int k = 0; k < in.rank; k++) {
            numel *= in.dims[k];
            printf(k ? ", %lld" : "%lld", (long long)in.dims[k]);
            if (f) fprintf(f, k ? ", %lld" : "%lld", (long long)in.dims[k]);
        }
        printf("] offset %zu, %lld floats\n", off, numel);
        if (f) fputs("]}", f);
        listed++;
    }
    printf("%zu parameters, %zu floats in the buffer\n", listed, otter_training_params_size(s, !all));
    if (f) {
        fputc(']', f);
        bool ok = !ferror(f);
        ok = (fclose(f) == 0) && ok;
        if (!ok) {
            fprintf(stderr, "otter params: out of memory building '%s'\n", json);
            rc = CLI_EXIT_INVALID;
        } else if (otter_write_file_atomic(json, text, text_len) != OTTER_OK) {
            rc = cli_fail("params", NULL);
        }
    }
    free(text);
    otter_training_session_free(s);
    return rc;
}
