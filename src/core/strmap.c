#include "core/strmap.h"

#include <string.h>

#include "core/core.h"

static size_t slot(const ot_strmap *m, const char *key) {
    size_t i = ot_hash_str(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & (m->cap - 1);
    return i;
}

static otter_status rehash(ot_strmap *m, size_t cap) {
    ot_strmap n = {ot_calloc(cap, sizeof(char *)), ot_calloc(cap, sizeof(intptr_t)), 0, cap};
    if (!n.keys || !n.values) {
        ot_free(n.keys);
        ot_free(n.values);
        return OT_NOMEM();
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            size_t j = slot(&n, m->keys[i]);
            n.keys[j] = m->keys[i];
            n.values[j] = m->values[i];
            n.count++;
        }
    ot_strmap_free(m);
    *m = n;
    return OTTER_OK;
}

otter_status ot_strmap_put(ot_strmap *m, const char *key, intptr_t value) {
    if ((m->count + 1) * 2 > m->cap) OT_TRY(rehash(m, m->cap ? m->cap * 2 : 64));
    size_t i = slot(m, key);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->count++;
    }
    m->values[i] = value;
    return OTTER_OK;
}

otter_status ot_strmap_reserve(ot_strmap *m, size_t expected) {
    size_t cap = m->cap ? m->cap : 64;
    while (cap < expected * 2 + 1) {
        if (cap > SIZE_MAX / 4) return OT_NOMEM();
        cap *= 2;
    }
    return cap == m->cap ? OTTER_OK : rehash(m, cap);
}

bool ot_strmap_get(const ot_strmap *m, const char *key, intptr_t *value) {
    if (!m->cap || !key) return false;
    size_t i = slot(m, key);
    if (!m->keys[i]) return false;
    if (value) *value = m->values[i];
    return true;
}

void ot_strmap_free(ot_strmap *m) {
    ot_free(m->keys);
    ot_free(m->values);
    memset(m, 0, sizeof *m);
}
