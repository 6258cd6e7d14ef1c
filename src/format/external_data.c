#include "format/external_data.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "core/float_formats.h"
#include "core/proto_extra.h"

#define HEADER_MAGIC "otter external data"

static const char *entry(const otter_tensor *t, const char *key) {
    for (size_t i = 0; i < t->extra->n_external; i++)
        if (ot_streq(t->extra->external[i].key, key)) return t->extra->external[i].value;
    return NULL;
}

static otter_status parse_u64(const otter_tensor *t, const char *key, const char *text, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-')
        return ot_error(OTTER_ERR_INVALID, "tensor '%s': external data %s '%s' is not a number", t->name, key, text);
    *out = v;
    return OTTER_OK;
}

/* A location must stay inside the model's folder: relative, no ".." component, and (after
 * resolving symbolic links) still under base_dir. */
static otter_status check_location(const otter_tensor *t, const char *base_dir, const char *location, char **path) {
    if (location[0] == '/')
        return ot_error(OTTER_ERR_INVALID, "tensor '%s': external data location '%s' is an absolute path", t->name,
                        location);
    for (const char *p = location; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return ot_error(OTTER_ERR_INVALID, "tensor '%s': external data location '%s' escapes the model's folder",
                            t->name, location);
        p += len + (slash ? 1 : 0);
    }
    if (!(*path = ot_path_join(base_dir, location))) return OT_NOMEM();
    char real_dir[PATH_MAX], real_file[PATH_MAX];
    if (!realpath(base_dir, real_dir) || !realpath(*path, real_file)) {
        otter_status s = ot_error(OTTER_ERR_NOT_FOUND, "tensor '%s': external data file '%s' not found: %s", t->name,
                                  *path, strerror(errno));
        ot_free(*path);
        *path = NULL;
        return s;
    }
    size_t n = strlen(real_dir);
    if (strncmp(real_file, real_dir, n) != 0 || (real_file[n] != '/' && strcmp(real_dir, "/") != 0)) {
        otter_status s =
            ot_error(OTTER_ERR_INVALID, "tensor '%s': external data location '%s' resolves outside the model's folder",
                     t->name, location);
        ot_free(*path);
        *path = NULL;
        return s;
    }
    return OTTER_OK;
}

otter_status ot_external_read(otter_tensor *t, const char *base_dir) {
    if (!t->name) t->name = ot_strdup("");
    if (!t->name) return OT_NOMEM();
    if (!base_dir)
        return ot_error(OTTER_ERR_INVALID, "tensor '%s' uses external data, which needs the model's folder", t->name);
    if (t->dtype == OTTER_DTYPE_STRING)
        return ot_error(OTTER_ERR_INVALID, "tensor '%s': string tensors can't use external data", t->name);
    const char *location = entry(t, "location");
    if (!location || !location[0])
        return ot_error(OTTER_ERR_INVALID, "tensor '%s': external data without a location", t->name);
    size_t numel = (size_t)otter_tensor_numel(t), need = ot_packed_size(t->dtype, numel);
    uint64_t offset = 0, length = need;
    const char *text;
    if ((text = entry(t, "offset"))) OT_TRY(parse_u64(t, "offset", text, &offset));
    if ((text = entry(t, "length"))) OT_TRY(parse_u64(t, "length", text, &length));
    if (length != need)
        return ot_error(OTTER_ERR_INVALID, "tensor '%s': external data length %llu but dims need %zu bytes", t->name,
                        (unsigned long long)length, need);
    char *path;
    OT_TRY(check_location(t, base_dir, location, &path));
    otter_status s = OTTER_OK;
    FILE *f = NULL;
    struct stat st;
    if ((s = ot_fopen_regular(path, &f, &st)) != OTTER_OK) {
        ot_error_context(s, "tensor '%s': external data: ", t->name);
    } else if ((uint64_t)st.st_size < offset || (uint64_t)st.st_size - offset < length) {
        s = ot_error(OTTER_ERR_INVALID,
                     "tensor '%s': external data '%s' is %lld bytes, too short for %llu bytes at offset %llu", t->name,
                     path, (long long)st.st_size, (unsigned long long)length, (unsigned long long)offset);
    } else if ((s = ot_tensor_alloc_data(t)) != OTTER_OK) {
    } else {
        /* 4- and 2-bit elements are packed in the file, one per byte in memory */
        bool packed = ot_dtype_packed(t->dtype);
        uint8_t *buf = packed && length ? ot_malloc(length) : t->data;
        if (!buf && length)
            s = OT_NOMEM();
        else if (length && (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(buf, 1, length, f) != length))
            s = ot_error(OTTER_ERR_IO, "tensor '%s': reading external data '%s' failed", t->name, path);
        else if (packed && length)
            ot_unpack_elems(t->dtype, buf, numel, t->data);
        if (packed && buf) ot_free(buf);
    }
    if (f) fclose(f);
    ot_free(path);
    return s;
}

otter_status ot_external_sink_open(ot_external_sink *s, const char *model_path, const char *external_file) {
    memset(s, 0, sizeof *s);
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    char *dir = ot_dirname(model_path);
    char *wanted = external_file ? ot_strdup(external_file) : ot_sprintf("%s.data", base);
    s->wanted_path = dir && wanted ? ot_path_join(dir, wanted) : NULL;
    s->tmp_path = s->wanted_path ? ot_sprintf("%s.tmp.%ld", s->wanted_path, (long)getpid()) : NULL;
    ot_random_id(s->generation);
    struct stat st;
    /* the wanted name taken (maybe by the data the live model reads): a fresh alternate instead */
    bool taken = s->wanted_path && lstat(s->wanted_path, &st) == 0;
    s->location = !wanted ? NULL : taken ? ot_sprintf("%s.%.16s", wanted, s->generation) : ot_strdup(wanted);
    s->path = dir && s->location ? ot_path_join(dir, s->location) : NULL;
    ot_free(dir);
    if (!s->tmp_path || !s->path) {
        ot_free(wanted);
        ot_external_sink_close(s, false);
        return OT_NOMEM();
    }
    if (strchr(wanted, '/') || strcmp(wanted, "..") == 0) {
        otter_status st_err = ot_error(OTTER_ERR_ARGUMENT, "external data file '%s' must be a plain file name", wanted);
        ot_free(wanted);
        ot_external_sink_close(s, false);
        return st_err;
    }
    ot_free(wanted);
    ot_remove_stale_temps(s->wanted_path);
    if (!(s->f = fopen(s->tmp_path, "wb"))) {
        otter_status st_err = ot_error(OTTER_ERR_IO, "%s: cannot create: %s", s->tmp_path, strerror(errno));
        ot_external_sink_close(s, false);
        return st_err;
    }
    char header[OT_EXTERNAL_HEADER_SIZE] = {0};
    snprintf(header, sizeof header, "%s %s\n", HEADER_MAGIC, s->generation);
    if (fwrite(header, 1, sizeof header, s->f) != sizeof header) {
        otter_status st_err = ot_error(OTTER_ERR_IO, "%s: write failed: %s", s->tmp_path, strerror(errno));
        ot_external_sink_close(s, false);
        return st_err;
    }
    s->size = sizeof header;
    return OTTER_OK;
}

otter_status ot_external_check_generation(const char *base_dir, const char *location, const char *generation) {
    if (!base_dir || strchr(location, '/') || strcmp(location, "..") == 0) return OTTER_OK; /* not otter's */
    char *path = ot_path_join(base_dir, location);
    if (!path) return OT_NOMEM();
    FILE *f = NULL;
    struct stat st;
    char header[OT_EXTERNAL_HEADER_SIZE + 1] = {0};
    if (ot_fopen_regular(path, &f, &st) != OTTER_OK) {
        otter_clear_error(); /* a missing file is reported by the tensors that need it */
    } else {
        if (fread(header, 1, OT_EXTERNAL_HEADER_SIZE, f) != OT_EXTERNAL_HEADER_SIZE) header[0] = '\0';
        fclose(f);
    }
    size_t magic = strlen(HEADER_MAGIC);
    otter_status s = OTTER_OK;
    if (strncmp(header, HEADER_MAGIC " ", magic + 1) == 0 && strncmp(header + magic + 1, generation, 32) != 0)
        s = ot_error(OTTER_ERR_INVALID,
                     "external data '%s' was written by another save than this model (generation %.32s, the model "
                     "records %.32s): files of two saves were mixed; re-save the model from a good copy",
                     path, header + magic + 1, generation);
    ot_free(path);
    return s;
}

otter_status ot_external_append(ot_external_sink *s, const otter_tensor *t, uint64_t *offset) {
    static const char zeros[64];
    size_t pad = (size_t)((64 - s->size % 64) % 64);
    if (pad && fwrite(zeros, 1, pad, s->f) != pad)
        return ot_error(OTTER_ERR_IO, "%s: write failed: %s", s->path, strerror(errno));
    s->size += pad;
    *offset = s->size;
    size_t numel = (size_t)otter_tensor_numel(t), n = ot_packed_size(t->dtype, numel);
    const void *bytes = t->data;
    uint8_t *packed = NULL;
    if (ot_dtype_packed(t->dtype) && n) { /* 4- and 2-bit elements are packed in the file */
        if (!(packed = ot_malloc(n))) return OT_NOMEM();
        ot_pack_elems(t->dtype, t->data, numel, packed);
        bytes = packed;
    }
    bool ok = !n || fwrite(bytes, 1, n, s->f) == n;
    ot_free(packed);
    if (!ok) return ot_error(OTTER_ERR_IO, "%s: write failed: %s", s->path, strerror(errno));
    s->size += n;
    return OTTER_OK;
}

otter_status ot_external_sink_commit(ot_external_sink *s) {
    otter_status st = OTTER_OK;
    if (fflush(s->f) != 0 || fsync(fileno(s->f)) != 0) st = ot_error(OTTER_ERR_IO, "%s: %s", s->path, strerror(errno));
    if (fclose(s->f) != 0 && st == OTTER_OK) st = ot_error(OTTER_ERR_IO, "%s: %s", s->path, strerror(errno));
    s->f = NULL;
    if (st == OTTER_OK && rename(s->tmp_path, s->path) != 0)
        st = ot_error(OTTER_ERR_IO, "%s: rename failed: %s", s->path, strerror(errno));
    if (st != OTTER_OK) return st;
    s->committed = true;
    return ot_fsync_parent(s->path);
}

/* "<wanted>.<16 lowercase hex digits>": a name ot_external_sink_open picks when the wanted one is taken. */
static bool is_alternate(const char *name, const char *wanted) {
    size_t n = strlen(wanted);
    if (strncmp(name, wanted, n) != 0 || name[n] != '.' || strlen(name + n + 1) != 16) return false;
    return strspn(name + n + 1, "0123456789abcdef") == 16;
}

/* Remove the data files of earlier saves: the wanted name and its alternates, except the one just written. */
static void remove_superseded(const ot_external_sink *s) {
    char *dir = ot_dirname(s->wanted_path);
    const char *slash = strrchr(s->wanted_path, '/');
    const char *wanted = slash ? slash + 1 : s->wanted_path;
    DIR *d = dir ? opendir(dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, s->location) == 0 || (strcmp(e->d_name, wanted) != 0 && !is_alternate(e->d_name, wanted)))
            continue;
        char *old = ot_path_join(dir, e->d_name);
        if (old) unlink(old);
        ot_free(old);
    }
    if (d) closedir(d);
    ot_free(dir);
}

void ot_external_sink_close(ot_external_sink *s, bool model_saved) {
    if (s->f) fclose(s->f);
    if (s->tmp_path && !s->committed) unlink(s->tmp_path);
    /* Committed data of a save that failed stays: the failure may have come after the model's rename
     * (syncing the folder). Unreferenced, it goes as superseded at the next save. */
    if (s->committed && model_saved) remove_superseded(s);
    ot_free(s->wanted_path);
    ot_free(s->path);
    ot_free(s->tmp_path);
    ot_free(s->location);
    memset(s, 0, sizeof *s);
}
