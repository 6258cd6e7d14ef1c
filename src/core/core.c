#include "core/core.h"
#include "otter/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- allocator hook ---- */

static void *default_malloc(size_t n, void *u) {
    (void)u;
    return malloc(n);
}
static void *default_realloc(void *p, size_t n, void *u) {
    (void)u;
    return realloc(p, n);
}
static void default_free(void *p, void *u) {
    (void)u;
    free(p);
}
static otter_allocator g_alloc = {default_malloc, default_realloc, default_free, NULL};

void otter_set_allocator(const otter_allocator *a) {
    if (a && a->malloc_fn && a->realloc_fn && a->free_fn)
        g_alloc = *a;
    else
        g_alloc = (otter_allocator){default_malloc, default_realloc, default_free, NULL};
}

void *ot_malloc(size_t n) { return g_alloc.malloc_fn(n ? n : 1, g_alloc.user); }
void *ot_calloc(size_t count, size_t size) {
    size_t n;
    if (!ot_mul_size(count, size, &n)) return NULL;
    void *p = ot_malloc(n);
    ot_huge_page_hint(p, n); /* before the zeros touch the pages */
    if (p) memset(p, 0, n ? n : 1);
    return p;
}
void *ot_realloc(void *p, size_t n) { return g_alloc.realloc_fn(p, n ? n : 1, g_alloc.user); }
void ot_free(void *p) {
    if (p) g_alloc.free_fn(p, g_alloc.user);
}
void otter_free(void *p) { ot_free(p); }

void ot_advise_whole_pages(void *start, size_t size, size_t page, int advice) {
    const uintptr_t lo = ((uintptr_t)start + page - 1) / page * page, hi = ((uintptr_t)start + size) / page * page;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, advice);
}

void ot_huge_page_hint(void *start, size_t size) {
#ifdef MADV_HUGEPAGE
    if (start && size >= OT_HUGE_PAGE_MIN) ot_advise_whole_pages(start, size, (size_t)2 << 20, MADV_HUGEPAGE);
#else
    (void)start, (void)size;
#endif
}

char *ot_strndup(const char *s, size_t n) {
    if (!s) return NULL;
    char *d = ot_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}
char *ot_strdup(const char *s) { return s ? ot_strndup(s, strlen(s)) : NULL; }

char *ot_sprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = ot_malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- errors ---- */

#define ERR_CAP 1024
static _Thread_local char g_err[ERR_CAP];

const char *otter_last_error(void) { return g_err; }
void otter_clear_error(void) { g_err[0] = '\0'; }

const char *otter_status_name(otter_status s) {
    switch (s) {
    case OTTER_OK:
        return "ok";
    case OTTER_ERR_INVALID:
        return "invalid input";
    case OTTER_ERR_IO:
        return "i/o error";
    case OTTER_ERR_NOMEM:
        return "out of memory";
    case OTTER_ERR_UNSUPPORTED:
        return "unsupported";
    case OTTER_ERR_ARGUMENT:
        return "bad argument";
    case OTTER_ERR_NOT_FOUND:
        return "not found";
    }
    return "unknown status";
}

otter_status ot_error(otter_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, ERR_CAP, fmt, ap);
    va_end(ap);
    return s;
}

otter_status ot_error_context(otter_status s, const char *fmt, ...) {
    char prefix[ERR_CAP], old[ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, ERR_CAP, fmt, ap);
    va_end(ap);
    memcpy(old, g_err, ERR_CAP);
    size_t np = strlen(prefix), no = strlen(old);
    if (np > ERR_CAP - 1) np = ERR_CAP - 1;
    if (no > ERR_CAP - 1 - np) no = ERR_CAP - 1 - np; /* long messages lose their tail */
    memcpy(g_err, prefix, np);
    memcpy(g_err + np, old, no);
    g_err[np + no] = '\0';
    return s;
}

_Noreturn void ot_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "otter: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

/* ---- log ---- */

static otter_log_fn g_log_fn;
static void *g_log_user;
void otter_set_log_callback(otter_log_fn fn, void *user) {
    g_log_fn = fn;
    g_log_user = user;
}
void ot_log(otter_log_level level, const char *fmt, ...) {
    if (!g_log_fn) return;
    char buf[ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_log_fn(level, buf, g_log_user);
}

/* ---- small utilities ---- */

otter_status ot_grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return OTTER_OK;
    size_t ncap = *cap ? *cap : 4;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return OT_NOMEM();
        ncap *= 2;
    }
    size_t bytes;
    if (!ot_mul_size(ncap, elem, &bytes)) return OT_NOMEM();
    void *p = ot_realloc(*arr, bytes);
    if (!p) return OT_NOMEM();
    memset((char *)p + *cap * elem, 0, (ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return OTTER_OK;
}

bool ot_streq(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

bool ot_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

void ot_random_id(char out[33]) {
    uint8_t random[16];
    if (getentropy(random, sizeof random) != 0) { /* glibc and emscripten have it */
        /* no entropy source: time, pid and the stack address still tell two calls apart */
        uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)out;
        for (size_t i = 0; i < sizeof random; i++) random[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)(i * 37);
    }
    for (size_t i = 0; i < sizeof random; i++) snprintf(out + 2 * i, 3, "%02x", random[i]);
}

/* ---- files ---- */

/* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. */
static otter_status open_regular(const char *path, int *fd_out, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ot_error(errno == ENOENT ? OTTER_ERR_NOT_FOUND : OTTER_ERR_IO, "%s: %s", path, strerror(errno));
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return ot_error(OTTER_ERR_IO, "%s: not a regular file (a FIFO, device or folder can't be read as data)", path);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *fd_out = fd;
    return OTTER_OK;
}

otter_status ot_fopen_regular(const char *path, FILE **out, struct stat *st) {
    int fd = -1;
    OT_TRY(open_regular(path, &fd, st));
    if (!(*out = fdopen(fd, "rb"))) {
        close(fd);
        return ot_error(OTTER_ERR_IO, "%s: %s", path, strerror(errno));
    }
    return OTTER_OK;
}

otter_status ot_read_file(const char *path, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    FILE *f;
    struct stat st;
    OT_TRY(ot_fopen_regular(path, &f, &st));
    size_t n = (size_t)st.st_size;
    char *buf = ot_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return ot_error(OTTER_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = n ? fread(buf, 1, n, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        ot_free(buf);
        return ot_error(OTTER_ERR_IO, "%s: read failed", path);
    }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return OTTER_OK;
}

otter_status ot_map_file(const char *path, const void **data, size_t *size, bool *mapped) {
    *mapped = false;
    int fd = -1;
    struct stat st;
    OT_TRY(open_regular(path, &fd, &st));
    void *p = st.st_size > 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (p != MAP_FAILED) {
        *data = p;
        *size = (size_t)st.st_size;
        *mapped = true;
        return OTTER_OK;
    }
    void *buf;
    OT_TRY(ot_read_file(path, &buf, size));
    *data = buf;
    return OTTER_OK;
}

void ot_unmap_file(const void *data, size_t size, bool mapped) {
    if (mapped)
        munmap((void *)data, size);
    else
        ot_free((void *)data);
}

struct buf_writer {
    const void *data;
    size_t size;
};
static otter_status write_buf(FILE *f, void *user) {
    struct buf_writer *b = user;
    if (b->size && fwrite(b->data, 1, b->size, f) != b->size)
        return ot_error(OTTER_ERR_IO, "write failed: %s", strerror(errno));
    return OTTER_OK;
}

otter_status ot_write_file_atomic(const char *path, const void *data, size_t size) {
    struct buf_writer b = {data, size};
    return ot_write_atomic_with(path, write_buf, &b);
}

otter_status otter_write_file_atomic(const char *path, const void *data, size_t size) {
    return ot_write_file_atomic(path, data, size);
}

void ot_remove_stale_temps(const char *path) {
    char *dir = ot_dirname(path);
    const char *slash = strrchr(path, '/');
    char *prefix = ot_sprintf("%s.tmp.", slash ? slash + 1 : path);
    DIR *d = dir && prefix ? opendir(dir) : NULL;
    size_t n = prefix ? strlen(prefix) : 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, n) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(e->d_name + n, &end, 10);
        /* Only a writer that no longer runs: a live one (another otter saving here) keeps its file. */
        if (*end || errno || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char *stale = ot_path_join(dir, e->d_name);
        if (stale) unlink(stale);
        ot_free(stale);
    }
    if (d) closedir(d);
    ot_free(prefix);
    ot_free(dir);
}

otter_status ot_fsync_parent(const char *path) {
    char *dir = ot_dirname(path);
    if (!dir) return OT_NOMEM();
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    otter_status s = OTTER_OK;
    /* EINVAL: a file system that can't sync folders; the rename is as durable as it gets there. */
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        s = ot_error(OTTER_ERR_IO, "%s: syncing the folder after a rename: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    ot_free(dir);
    return s;
}

otter_status ot_write_atomic_with(const char *path, otter_status (*writer)(FILE *f, void *user), void *user) {
    ot_remove_stale_temps(path);
    char *tmp = ot_sprintf("%s.tmp.%ld", path, (long)getpid());
    if (!tmp) return OT_NOMEM();
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        otter_status s = ot_error(OTTER_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        ot_free(tmp);
        return s;
    }
    otter_status s = writer(f, user);
    if (s == OTTER_OK && fflush(f) != 0) s = ot_error(OTTER_ERR_IO, "%s: %s", path, strerror(errno));
    if (s == OTTER_OK && fsync(fileno(f)) != 0) s = ot_error(OTTER_ERR_IO, "%s: %s", path, strerror(errno));
    if (fclose(f) != 0 && s == OTTER_OK) s = ot_error(OTTER_ERR_IO, "%s: %s", path, strerror(errno));
    if (s == OTTER_OK && rename(tmp, path) != 0)
        s = ot_error(OTTER_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
    if (s == OTTER_OK) s = ot_fsync_parent(path);
    if (s != OTTER_OK) {
        unlink(tmp);
        ot_error_context(s, "writing '%s': ", path);
    }
    ot_free(tmp);
    return s;
}

char *ot_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return ot_strdup(".");
    if (slash == path) return ot_strdup("/");
    return ot_strndup(path, (size_t)(slash - path));
}

char *ot_path_join(const char *dir, const char *name) {
    if (!dir || !dir[0] || name[0] == '/') return ot_strdup(name);
    size_t n = strlen(dir);
    return ot_sprintf("%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name);
}
