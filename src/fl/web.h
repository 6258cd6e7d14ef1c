/* Static files for `otter fl serve --web`: the browser client page, the web/ package it imports, and (behind a
 * token) the artifacts and data shards a browser client trains on, served by the federated server's own
 * libmicrohttpd daemon (same listener, TLS and connection limits as the API). Internal to src/fl/. */
#ifndef OTTER_FL_WEB_H
#define OTTER_FL_WEB_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "otter/fl.h"
#include "otter/status.h"

typedef struct ot_fl_web ot_fl_web;

/* Copies the mounts, resolving each directory once (realpath): every file served must resolve under it.
 * An error names the mount whose prefix or directory is unusable. */
otter_status ot_fl_web_create(ot_fl_web **out, const otter_fl_web_mount *mounts, size_t n, size_t max_file);
void ot_fl_web_free(ot_fl_web *w);

/* The mount a GET of url falls under (NULL: none), so the caller can require a token before serving. */
const otter_fl_web_mount *ot_fl_web_match(const ot_fl_web *w, const char *url);

/* The response to a GET of url under mount m: the file with its MIME type (status 200), or NULL with *status
 * 404 for a path that is unsafe (a component that is empty or starts with '.', a byte outside [A-Za-z0-9._-]),
 * missing, not a regular file or resolving outside the mount (a symlink out), 413 for a file over the size
 * cap, 500 when out of memory. "DIR/" serves DIR/index.html. *why: a short reason for the server's log. */
struct MHD_Response *ot_fl_web_open(const ot_fl_web *w, const otter_fl_web_mount *m, const char *url, unsigned *status,
                                    const char **why);

#endif
