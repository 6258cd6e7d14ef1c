/* Internal helpers shared by every layer: allocation through the hook, error reporting,
 * strings, growable arrays, files. */
#ifndef OTTER_CORE_H
#define OTTER_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "otter/status.h"
#include "otter/tensor.h"

/* Allocation: every byte the library owns goes through these (the otter_set_allocator hook). */
void *ot_malloc(size_t n);
/* Checks count*size for overflow; OT_HUGE_PAGE_MIN bytes or more ask for 2 MB pages (ot_huge_page_hint)
 * before the zeros touch them: a training batch read strided by its first Transpose (encoder_d256's
 * [32, 128, 256], 1 KB a row 128 KB apart) took 7-10 ms on 4 KB pages, 2.2-3.3 ms so; the weights'
 * Transposes, reading the training state's slabs a row apart, 12.0-12.7 -> 6.4-8.2 ms a step. */
void *ot_calloc(size_t count, size_t size);
void *ot_realloc(void *p, size_t n);
void ot_free(void *p);
/* madvise(advice) over the whole pages of `page` bytes inside [start, start + size). */
void ot_advise_whole_pages(void *start, size_t size, size_t page, int advice);
/* A buffer of OT_HUGE_PAGE_MIN bytes or more, not touched yet, asks for 2 MB pages over its 2 MB-aligned
 * part where the kernel gives them on request (transparent huge pages in "madvise" mode, Debian's
 * default): rows read a page or more apart (activations, a transformer's heads, a batch read strided by
 * its first Transpose) otherwise cost a TLB miss each. A hint: nothing changes but the page size. */
#define OT_HUGE_PAGE_MIN ((size_t)4 << 20)
void ot_huge_page_hint(void *start, size_t size);
char *ot_strdup(const char *s); /* NULL in, NULL out */
char *ot_strndup(const char *s, size_t n);
char *ot_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Set this thread's error message and return the status, so callers write
 * `return ot_error(OTTER_ERR_INVALID, "node '%s': ...", name);` */
otter_status ot_error(otter_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with context ("loading 'x.onnx': " + message). Returns s. */
otter_status ot_error_context(otter_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define OT_NOMEM() ot_error(OTTER_ERR_NOMEM, "out of memory at %s:%d", __FILE__, __LINE__)
/* Propagate a failure. */
#define OT_TRY(expr)                                                                                                   \
    do {                                                                                                               \
        otter_status ot_try_s_ = (expr);                                                                               \
        if (ot_try_s_ != OTTER_OK) return ot_try_s_;                                                                   \
    } while (0)

/* Internal invariant: aborts with file and line (never for bad input). */
#define OT_ASSERT(cond)                                                                                                \
    do {                                                                                                               \
        if (!(cond)) ot_assert_fail(#cond, __FILE__, __LINE__);                                                        \
    } while (0)
_Noreturn void ot_assert_fail(const char *expr, const char *file, int line);

void ot_log(otter_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A tensor with its shape checked but no data yet (data NULL), and the step that allocates it
 * (zeroed): for readers that validate sizes before trusting a file's dims with memory. */
otter_status ot_tensor_shell(otter_tensor **out, const char *name, otter_dtype dtype, int rank, const int64_t *dims);
otter_status ot_tensor_alloc_data(otter_tensor *t);

/* Grow *arr (of elements of size elem) so it can hold need elements; *cap tracks capacity. */
otter_status ot_grow(void **arr, size_t *cap, size_t need, size_t elem);

bool ot_streq(const char *a, const char *b); /* NULL-safe; NULL equals NULL only */
/* NULL and "" are both "not set" for domain-like strings. */
static inline bool ot_str_empty(const char *s) { return s == NULL || s[0] == '\0'; }

/* FNV-1a 64, the library's one hash: hash tables of names, content hashes, and the FL wire format's
 * layout hash and state checksum (so its values must never change). Continue a hash with ot_fnv1a(h, ...). */
#define OT_FNV1A_OFFSET 1469598103934665603ull
static inline uint64_t ot_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
static inline uint64_t ot_hash_str(const char *s) {
    uint64_t h = OT_FNV1A_OFFSET;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Checked size arithmetic: false on overflow. */
bool ot_mul_size(size_t a, size_t b, size_t *out);

/* 32 random hex digits and a NUL: an identifier two saves won't share. */
void ot_random_id(char out[33]);
/* Open a regular file for reading; FIFOs, devices and folders are refused without blocking. */
otter_status ot_fopen_regular(const char *path, FILE **out, struct stat *st);
/* Whole file into memory (ot_free it). Errors name the path. */
otter_status ot_read_file(const char *path, void **data, size_t *size);
/* Map a whole file read-only (falls back to reading it); release with ot_unmap_file. */
otter_status ot_map_file(const char *path, const void **data, size_t *size, bool *mapped);
void ot_unmap_file(const void *data, size_t size, bool mapped);
/* Remove "<path>.tmp.<pid>" files left by writers that died mid-write (their process is gone). */
void ot_remove_stale_temps(const char *path);
/* fsync the folder holding path, so a rename into it survives a power loss. */
otter_status ot_fsync_parent(const char *path);
/* Write atomically: stale temporaries removed, a temporary file in the same folder, fsync, rename
 * over path, fsync of the folder. */
otter_status ot_write_file_atomic(const char *path, const void *data, size_t size);
/* Same, with the content produced by a callback writing to a FILE. */
otter_status ot_write_atomic_with(const char *path, otter_status (*writer)(FILE *f, void *user), void *user);
/* Folder part of a path ("." when none); ot_free it. */
char *ot_dirname(const char *path);
char *ot_path_join(const char *dir, const char *name);

#endif
