#include "testutil.h"

#include <sys/stat.h>

int tu_failures;
int tu_checks;

int tu_finish(const char *name) {
    printf("%s: %d checks, %d failed\n", name, tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}

const char *tu_src_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", OTTER_SOURCE_DIR, rel);
    return buf;
}

const char *tu_tmp_path(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/tmp", OTTER_BINARY_DIR);
    mkdir(buf, 0755);
    snprintf(buf, sizeof buf, "%s/tests/tmp/%s", OTTER_BINARY_DIR, name);
    return buf;
}
