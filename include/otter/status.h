/* otter: status codes, error messages, the allocator hook and the log callback. */
#ifndef OTTER_STATUS_H
#define OTTER_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OTTER_VERSION "0.1.0"

/* Marks the library's public functions: libotter is built with hidden visibility, so only
 * declarations carrying OTTER_API are exported from the shared library. */
#if defined(OTTER_BUILDING_LIBRARY) && defined(__GNUC__)
#define OTTER_API __attribute__((visibility("default")))
#else
#define OTTER_API
#endif

/* Every fallible call returns one of these. The message of the last failure on the
 * calling thread (naming the file, node or tensor at fault) is otter_last_error(). */
typedef enum otter_status {
    OTTER_OK = 0,
    OTTER_ERR_INVALID = 1,     /* malformed or inconsistent input (model, tensor, file) */
    OTTER_ERR_IO = 2,          /* a file could not be read or written */
    OTTER_ERR_NOMEM = 3,       /* an allocation failed */
    OTTER_ERR_UNSUPPORTED = 4, /* valid input that otter does not implement */
    OTTER_ERR_ARGUMENT = 5,    /* the caller passed a bad argument */
    OTTER_ERR_NOT_FOUND = 6    /* a named node, tensor or file does not exist */
} otter_status;

OTTER_API const char *otter_status_name(otter_status s);

/* Message of the last failure on this thread ("" when none). */
OTTER_API const char *otter_last_error(void);
OTTER_API void otter_clear_error(void);

/* One allocator hook for the whole library. Pass NULLs to restore the C library's. */
typedef struct otter_allocator {
    void *(*malloc_fn)(size_t size, void *user);
    void *(*realloc_fn)(void *ptr, size_t size, void *user);
    void (*free_fn)(void *ptr, void *user);
    void *user;
} otter_allocator;
OTTER_API void otter_set_allocator(const otter_allocator *a);
/* Release a buffer the library allocated for the caller (a serialized model, checkpoint or message, a
 * printed text): it goes back through the allocator hook that made it. NULL is a no-op. */
OTTER_API void otter_free(void *p);

/* The library never prints: messages go to this callback (default: discarded). */
typedef enum otter_log_level { OTTER_LOG_DEBUG, OTTER_LOG_INFO, OTTER_LOG_WARN } otter_log_level;
typedef void (*otter_log_fn)(otter_log_level level, const char *msg, void *user);
OTTER_API void otter_set_log_callback(otter_log_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
