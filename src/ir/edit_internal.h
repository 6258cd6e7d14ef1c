/* Internal helpers shared by the graph tools (clean, merge, extract, print, dot): the names a node reads
 * (including through its subgraphs), renaming with scopes, moving values. Their name maps are core/strmap's. */
#ifndef OTTER_EDIT_INTERNAL_H
#define OTTER_EDIT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/strmap.h"
#include "otter/ir.h"

/* Calls fn for every tensor name node n reads: its non-empty inputs, then the names its subgraph
 * attributes read from the outer scope (names used there but not defined there). A name may come
 * more than once. Stops at the first failure of fn. */
typedef otter_status (*ot_name_fn)(const char *name, void *user);
otter_status ot_node_reads(const otter_node *n, ot_name_fn fn, void *user);

/* Rename reads of `old_name` to `new_name` in nodes of g (node inputs, and inside subgraphs where
 * the name is not redefined). Does not touch graph inputs, outputs, initializers or node outputs. */
otter_status ot_graph_rename_reads(otter_graph *g, const char *old_name, const char *new_name);

/* Append v (moved: the caller forgets it) to an array of values with count and capacity. */
otter_status ot_values_push(otter_value **arr, size_t *n, size_t *cap, otter_value v);
/* Free the strings, type and extra of a value (not the value itself). */
void ot_value_clear(otter_value *v);
/* Deep copy of a value. */
otter_status ot_value_copy(otter_value *dst, const otter_value *src);

/* Replace *s by prefix + *s (unless *s is NULL or ""). */
otter_status ot_prefix_string(char **s, const char *prefix);

/* A growable string; a failed allocation is sticky and reported by ot_sb_finish. */
typedef struct ot_sb {
    char *data;
    size_t len, cap;
    bool failed;
} ot_sb;
void ot_sb_printf(ot_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ot_sb_puts(ot_sb *b, const char *s);
/* Hand the string to *out (or free it and return OTTER_ERR_NOMEM). */
otter_status ot_sb_finish(ot_sb *b, char **out);

#endif
