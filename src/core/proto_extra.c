#include "core/proto_extra.h"

#include <string.h>

#include "core/core.h"

struct otter_proto_extra *ot_proto_extra_new(void) {
    return ot_calloc(1, sizeof(struct otter_proto_extra));
}

void ot_proto_extra_free(struct otter_proto_extra *e) {
    if (!e) return;
    for (size_t i = 0; i < e->n_unknown; i++) ot_free(e->unknown[i].data);
    ot_free(e->unknown);
    for (size_t i = 0; i < e->n_external; i++) {
        ot_free(e->external[i].key);
        ot_free(e->external[i].value);
    }
    ot_free(e->external);
    ot_free(e->doc_string);
    ot_free(e);
}

struct otter_proto_extra *ot_proto_extra_clone(const struct otter_proto_extra *e) {
    if (!e) return NULL;
    struct otter_proto_extra *c = ot_proto_extra_new();
    if (!c) return NULL;
    *c = *e;
    c->unknown = NULL;
    c->external = NULL;
    c->doc_string = NULL;
    c->n_unknown = c->n_external = 0;
    if (e->doc_string && !(c->doc_string = ot_strdup(e->doc_string))) goto fail;
    if (e->n_unknown) {
        if (!(c->unknown = ot_calloc(e->n_unknown, sizeof *c->unknown))) goto fail;
        for (; c->n_unknown < e->n_unknown; c->n_unknown++) {
            ot_unknown_field *d = &c->unknown[c->n_unknown];
            *d = e->unknown[c->n_unknown];
            if (!(d->data = ot_malloc(d->len))) goto fail;
            memcpy(d->data, e->unknown[c->n_unknown].data, d->len);
        }
    }
    if (e->n_external) {
        if (!(c->external = ot_calloc(e->n_external, sizeof *c->external))) goto fail;
        for (; c->n_external < e->n_external; c->n_external++) {
            ot_string_pair *d = &c->external[c->n_external];
            d->key = ot_strdup(e->external[c->n_external].key);
            d->value = ot_strdup(e->external[c->n_external].value);
            if (!d->key || !d->value) {
                c->n_external++;
                goto fail;
            }
        }
    }
    return c;
fail:
    ot_proto_extra_free(c);
    return NULL;
}
