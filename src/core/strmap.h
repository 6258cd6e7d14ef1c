/* A string-keyed hash map (open addressing). Keys are borrowed: they must outlive the map. */
#ifndef OTTER_CORE_STRMAP_H
#define OTTER_CORE_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/status.h"

typedef struct ot_strmap {
    const char **keys;
    intptr_t *values;
    size_t count, cap;
} ot_strmap;

/* Insert or overwrite. */
otter_status ot_strmap_put(ot_strmap *m, const char *key, intptr_t value);
/* true and *value when present. value may be NULL. */
bool ot_strmap_get(const ot_strmap *m, const char *key, intptr_t *value);
static inline bool ot_strmap_has(const ot_strmap *m, const char *key) { return ot_strmap_get(m, key, NULL); }
/* Size the table for `expected` keys now, so filling it never rehashes (a zeroed map is empty and valid). */
otter_status ot_strmap_reserve(ot_strmap *m, size_t expected);
void ot_strmap_free(ot_strmap *m);

#endif
