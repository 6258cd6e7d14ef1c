/* otter check MODEL: the checker (structure, operator schemas and, by default, shape inference). */
#include <stdio.h>

#include "cli.h"
#include "otter/check.h"

/* The checker's warnings (an opset newer than otter's schemas, experimental operators). */
static void print_warning(otter_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == OTTER_LOG_WARN) fprintf(stderr, "otter check: warning: %s\n", msg);
}

int cmd_check(int argc, char **argv) {
    bool no_full = false;
    const cli_opt opts[] = {{"--no-full", NULL, NULL, "skip shape inference (onnx's full_check=False)", NULL, &no_full},
                            {0}};
    const cli_spec spec = {"check",
                           "MODEL.onnx",
                           "Check a model like onnx.checker.check_model(full_check=True): structure, operator\n"
                           "schemas for the model's opsets, and type/shape inference. Prints every problem, each\n"
                           "naming the node or tensor at fault; exit status 1 when there is any.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    otter_model *m = NULL;
    if (!cli_load("check", pos[0], &m)) return CLI_EXIT_INVALID;
    otter_check_report *r = NULL;
    if (otter_check_report_create(&r) != OTTER_OK) {
        otter_model_free(m);
        return cli_fail("check", NULL);
    }
    otter_check_options o = {.full_check = !no_full, .report = r};
    otter_set_log_callback(print_warning, NULL);
    otter_status s = otter_model_check(m, &o);
    otter_set_log_callback(NULL, NULL);
    size_t n = otter_check_report_count(r);
    if (s == OTTER_OK) {
        printf("%s: valid\n", pos[0]);
    } else if (s == OTTER_ERR_INVALID && n > 0) {
        for (size_t i = 0; i < n; i++) printf("%s: %s\n", pos[0], otter_check_report_message(r, i));
        fprintf(stderr, "otter check: %s: %zu problem%s\n", pos[0], n, n == 1 ? "" : "s");
    } else {
        cli_fail("check", pos[0]);
    }
    otter_check_report_free(r);
    otter_model_free(m);
    return s == OTTER_OK ? CLI_EXIT_OK : CLI_EXIT_INVALID;
}
