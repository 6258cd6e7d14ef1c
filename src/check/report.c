/* The checker's report: the problems found, each one line naming the node or tensor at fault. */
#include "check/check_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* ---- the report --------------------------------------------------------------------------- */

typedef struct ot_diag {
    char *message;
    char *node;
    char *op_type;
} ot_diag;

struct otter_check_report {
    size_t n, cap;
    ot_diag *items;
};

otter_status otter_check_report_create(otter_check_report **out) {
    if (out == NULL) return ot_error(OTTER_ERR_ARGUMENT, "otter_check_report_create: out is NULL");
    *out = ot_calloc(1, sizeof **out);
    if (*out == NULL) return OT_NOMEM();
    return OTTER_OK;
}

void otter_check_report_clear(otter_check_report *r) {
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++) {
        ot_free(r->items[i].message);
        ot_free(r->items[i].node);
        ot_free(r->items[i].op_type);
    }
    r->n = 0;
}

void otter_check_report_free(otter_check_report *r) {
    if (r == NULL) return;
    otter_check_report_clear(r);
    ot_free(r->items);
    ot_free(r);
}

size_t otter_check_report_count(const otter_check_report *r) { return r ? r->n : 0; }

const char *otter_check_report_message(const otter_check_report *r, size_t i) {
    return r && i < r->n ? r->items[i].message : NULL;
}

const char *otter_check_report_node(const otter_check_report *r, size_t i) {
    return r && i < r->n ? r->items[i].node : NULL;
}

const char *otter_check_report_op_type(const otter_check_report *r, size_t i) {
    return r && i < r->n ? r->items[i].op_type : NULL;
}

bool ot_check_stopped(const ot_checker *c) {
    return c->fatal != OTTER_OK || (c->n_problems > 0 && c->opts->stop_at_first);
}

const char *ot_check_node_name(const otter_node *n) { return n && n->name ? n->name : ""; }

void ot_check_problem(ot_checker *c, const otter_node *n, size_t node_index, const char *fmt, ...) {
    if (ot_check_stopped(c)) return;
    char body[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    char *msg;
    if (n == NULL)
        msg = ot_sprintf("%s%s", c->prefix, body);
    else if (!ot_str_empty(n->name))
        msg = ot_sprintf("%snode '%s' (%s): %s", c->prefix, n->name, n->op_type ? n->op_type : "", body);
    else
        msg = ot_sprintf("%snode #%zu (%s): %s", c->prefix, node_index, n->op_type ? n->op_type : "", body);
    if (msg == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
        return;
    }
    c->n_problems++;
    if (c->opts->callback) c->opts->callback(msg, c->opts->callback_user);
    otter_check_report *r = c->opts->report;
    if (r) {
        if (ot_grow((void **)&r->items, &r->cap, r->n + 1, sizeof *r->items) != OTTER_OK) {
            ot_free(msg);
            c->fatal = OTTER_ERR_NOMEM;
            return;
        }
        ot_diag *d = &r->items[r->n];
        d->message = ot_strdup(msg);
        d->node = ot_strdup(n ? ot_check_node_name(n) : "");
        d->op_type = ot_strdup(n && n->op_type ? n->op_type : "");
        if (!d->message || !d->node || !d->op_type) {
            ot_free(d->message);
            ot_free(d->node);
            ot_free(d->op_type);
            ot_free(msg);
            c->fatal = OTTER_ERR_NOMEM;
            return;
        }
        r->n++;
    }
    if (c->first == NULL)
        c->first = msg;
    else
        ot_free(msg);
}
/* Shape inference words it "... node 'name' (Op): ...". */
void ot_check_name_node_from_message(otter_check_report *r) {
    if (r == NULL || r->n == 0) return;
    ot_diag *d = &r->items[r->n - 1];
    const char *p = strstr(d->message, "node '");
    if (p == NULL) return;
    p += 6;
    const char *q = strstr(p, "' (");
    if (q == NULL) return;
    const char *e = strchr(q + 3, ')');
    if (e == NULL) return;
    char *name = ot_strndup(p, (size_t)(q - p));
    char *op = ot_strndup(q + 3, (size_t)(e - (q + 3)));
    if (name == NULL || op == NULL) { /* keep the empty ones */
        ot_free(name);
        ot_free(op);
        return;
    }
    ot_free(d->node);
    ot_free(d->op_type);
    d->node = name;
    d->op_type = op;
}
