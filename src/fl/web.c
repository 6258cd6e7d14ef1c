/* Static files for `otter fl serve --web` (see web.h). A file is served only when its URL path is made of
 * plain names, it resolves (symlinks followed) to a regular file inside its mount's directory, and it is no
 * larger than the cap; everything else is a 404 that says nothing about what exists. */
#include "fl/web.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

typedef struct web_mount {
    otter_fl_web_mount m; /* prefix and dir owned */
    char *root;           /* realpath of dir */
} web_mount;

struct ot_fl_web {
    web_mount *mounts;
    size_t n;
    size_t max_file;
};

void ot_fl_web_free(ot_fl_web *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        ot_free((char *)w->mounts[i].m.prefix), ot_free((char *)w->mounts[i].m.dir);
        free(w->mounts[i].root); /* from realpath */
    }
    ot_free(w->mounts);
    ot_free(w);
}

otter_status ot_fl_web_create(ot_fl_web **out, const otter_fl_web_mount *mounts, size_t n, size_t max_file) {
    ot_fl_web *w = ot_calloc(1, sizeof *w);
    if (!w || !(w->mounts = ot_calloc(n ? n : 1, sizeof *w->mounts))) {
        ot_free(w);
        return OT_NOMEM();
    }
    w->max_file = max_file ? max_file : (size_t)256 << 20;
    otter_status st = OTTER_OK;
    for (; w->n < n; w->n++) {
        const otter_fl_web_mount *m = &mounts[w->n];
        size_t pl = m->prefix ? strlen(m->prefix) : 0;
        if (pl == 0 || m->prefix[0] != '/' || m->prefix[pl - 1] != '/' || !m->dir) {
            st = ot_error(OTTER_ERR_ARGUMENT, "web mount %zu: the URL prefix must start and end with '/' ('%s')", w->n,
                          m->prefix ? m->prefix : "");
            break;
        }
        char *root = realpath(m->dir, NULL);
        struct stat sb;
        if (!root || stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            st = ot_error(OTTER_ERR_IO, "web mount %s: %s: %s", m->prefix, m->dir,
                          root ? "not a directory" : strerror(errno));
            free(root);
            break;
        }
        web_mount *wm = &w->mounts[w->n];
        wm->root = root;
        wm->m = *m;
        wm->m.prefix = ot_strdup(m->prefix), wm->m.dir = ot_strdup(m->dir);
        if (!wm->m.prefix || !wm->m.dir) {
            w->n++; /* freed with the others */
            st = OT_NOMEM();
            break;
        }
    }
    if (st != OTTER_OK) {
        ot_fl_web_free(w);
        return st;
    }
    *out = w;
    return OTTER_OK;
}

const otter_fl_web_mount *ot_fl_web_match(const ot_fl_web *w, const char *url) {
    const web_mount *best = NULL; /* the longest prefix wins: "/web/artifacts/" inside "/web/" */
    for (size_t i = 0; w && i < w->n; i++) {
        size_t pl = strlen(w->mounts[i].m.prefix);
        if (strncmp(url, w->mounts[i].m.prefix, pl) == 0 && (!best || pl > strlen(best->m.prefix)))
            best = &w->mounts[i];
    }
    return best ? &best->m : NULL;
}

/* Every component a plain name: not empty, not starting with '.', only [A-Za-z0-9._-]. */
static bool safe_relative(const char *rel) {
    const char *c = rel;
    for (;;) {
        size_t len = strcspn(c, "/");
        if (len == 0 || c[0] == '.') return false;
        for (size_t i = 0; i < len; i++)
            if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-", c[i])) return false;
        if (c[len] == '\0') return true;
        c += len + 1;
    }
}

static const char *mime_type(const char *path) {
    static const char *const types[][2] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".cjs", "text/javascript; charset=utf-8"},
        {".wasm", "application/wasm"},
        {".json", "application/json"},
        {".css", "text/css; charset=utf-8"},
        {".md", "text/markdown; charset=utf-8"},
        {".txt", "text/plain; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
    };
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash))
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (strcmp(dot, types[i][0]) == 0) return types[i][1];
    return "application/octet-stream"; /* artifacts (.onnx, .ckpt), IDX files */
}

struct MHD_Response *ot_fl_web_open(const ot_fl_web *w, const otter_fl_web_mount *m, const char *url, unsigned *status,
                                    const char **why) {
    const web_mount *wm = (const web_mount *)(const void *)m; /* m is the first member of one of ours */
    const char *rel = url + strlen(m->prefix);
    *status = MHD_HTTP_NOT_FOUND, *why = "unsafe path";
    size_t rl = strlen(rel);
    if (rl > PATH_MAX / 2) return NULL;
    char path[PATH_MAX];
    /* "DIR/" (the mount itself included) serves DIR/index.html */
    int k = snprintf(path, sizeof path, "%s%s", rel, rl == 0 || rel[rl - 1] == '/' ? "index.html" : "");
    if (k < 0 || (size_t)k >= sizeof path || !safe_relative(path)) return NULL;
    char *full = ot_path_join(wm->root, path);
    if (!full) {
        *status = MHD_HTTP_INTERNAL_SERVER_ERROR, *why = "out of memory";
        return NULL;
    }
    char *resolved = realpath(full, NULL);
    ot_free(full);
    size_t rootl = strlen(wm->root);
    *why = "no such file";
    if (!resolved) return NULL;
    bool inside = strncmp(resolved, wm->root, rootl) == 0 && resolved[rootl] == '/';
    int fd = inside ? open(resolved, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    free(resolved);
    if (!inside) *why = "resolves outside the served directory";
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        *why = "not a regular file";
        return NULL;
    }
    if ((uint64_t)sb.st_size > w->max_file) {
        close(fd);
        *status = MHD_HTTP_CONTENT_TOO_LARGE, *why = "file larger than the size cap";
        return NULL;
    }
    struct MHD_Response *r = MHD_create_response_from_fd((size_t)sb.st_size, fd); /* owns fd from here */
    if (!r) {
        close(fd);
        *status = MHD_HTTP_INTERNAL_SERVER_ERROR, *why = "out of memory";
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", mime_type(path));
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    *status = MHD_HTTP_OK, *why = NULL;
    return r;
}
