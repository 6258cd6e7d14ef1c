/* otter dot MODEL [-o out.dot|.svg|.png]: Graphviz rendering of the graph. */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "otter/print.h"

extern char **environ;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Run graphviz's `dot -T<format> -o out in`; prints the failure and returns false. */
static bool render(const char *format, const char *in, const char *out) {
    char tflag[16];
    snprintf(tflag, sizeof tflag, "-T%s", format);
    char *args[] = {"dot", tflag, "-o", (char *)out, (char *)in, NULL};
    pid_t pid;
    int err = posix_spawnp(&pid, "dot", NULL, NULL, args, environ);
    if (err != 0) {
        fprintf(stderr, "otter dot: cannot run graphviz's 'dot' (%s); install graphviz or write a .dot file\n",
                strerror(err));
        return false;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return false;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "otter dot: 'dot %s' failed writing '%s'\n", tflag, out);
        return false;
    }
    return true;
}

int cmd_dot(int argc, char **argv) {
    const char *out = NULL, *rankdir = NULL;
    bool hide = false;
    const cli_opt opts[] = {{"--output", "-o", "FILE",
                             "write FILE: .dot as text, .svg/.png rendered by graphviz (default: stdout)", &out, NULL},
                            {"--rankdir", NULL, "TB|LR", "layout direction (default TB)", &rankdir, NULL},
                            {"--hide-initializers", NULL, NULL,
                             "list initializers inside the reading node instead of drawing them", NULL, &hide},
                            {0}};
    const cli_spec spec = {"dot",
                           "MODEL.onnx",
                           "Draw the graph with Graphviz: nodes as boxes (op type and name), tensors as edges\n"
                           "labelled with name and type where declared, inputs, outputs and initializers styled.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    const char *format = NULL;
    if (out && ends_with(out, ".svg"))
        format = "svg";
    else if (out && ends_with(out, ".png"))
        format = "png";
    else if (out && !ends_with(out, ".dot") && !ends_with(out, ".gv"))
        return cli_usage_error(&spec, "output '%s' should end in .dot, .gv, .svg or .png", out);

    otter_model *m = NULL;
    if (!cli_load("dot", pos[0], &m)) return CLI_EXIT_INVALID;
    otter_dot_options o = {.hide_initializers = hide, .rankdir = rankdir};
    char *text = NULL;
    otter_status s = otter_graph_to_dot(m->graph, &o, &text);
    otter_model_free(m);
    if (s == OTTER_ERR_ARGUMENT) return cli_usage_error(&spec, "%s", otter_last_error());
    if (s != OTTER_OK) return cli_fail("dot", pos[0]);
    rc = CLI_EXIT_OK;
    if (!out) {
        fputs(text, stdout);
    } else if (!format) {
        if (!write_text(out, text)) {
            fprintf(stderr, "otter dot: cannot write '%s': %s\n", out, strerror(errno));
            rc = CLI_EXIT_INVALID;
        }
    } else {
        char tmp[] = "/tmp/otter-dot-XXXXXX";
        int fd = mkstemp(tmp);
        if (fd < 0 || close(fd) != 0 || !write_text(tmp, text)) {
            fprintf(stderr, "otter dot: cannot write a temporary file: %s\n", strerror(errno));
            rc = CLI_EXIT_INVALID;
        } else if (!render(format, tmp, out)) {
            rc = CLI_EXIT_INVALID;
        }
        if (fd >= 0) unlink(tmp);
    }
    if (rc == CLI_EXIT_OK && out) printf("wrote %s\n", out);
    otter_free(text);
    return rc;
}
