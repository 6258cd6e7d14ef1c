/* String operators: StringNormalizer (opset 10) and StringConcat, StringSplit and RegexFullMatch
 * (opset 20, on PCRE2).
 *
 * Strings are UTF-8 byte runs (otter_bytes); outputs own copies made with ot_malloc, which the
 * runtime frees with the value. Semantics follow ONNX's reference implementation: StringSplit is
 * Python's str.split, RegexFullMatch is RE2's FullMatch; StringNormalizer changes case per Unicode
 * character under the node's locale, as ONNX Runtime does. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <locale.h>
#ifndef OTTER_NO_PCRE2
#include <pcre2.h>
#endif
#include <wctype.h>

#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

/* A copy of n bytes at s as an output string (NUL-terminated for C callers). */
static otter_status set_string(otter_bytes *out, const char *s, size_t n) {
    out->data = ot_strndup(n ? s : "", n);
    if (!out->data) return OT_NOMEM();
    out->len = n;
    return OTTER_OK;
}

static otter_status need_strings(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t) {
    OT_TRY(ot_ctx_need_input(ctx, i, t));
    return (*t)->dtype == OTTER_DTYPE_STRING ? OTTER_OK : ot_ctx_bad_type(ctx, i, (*t)->dtype);
}

/* ---- StringNormalizer --------------------------------------------------------------------- */

/* The code point of the UTF-8 sequence at s[0..n) and its length in *len; an invalid or truncated
 * sequence is its first byte alone, returned as -1 (copied unchanged, never case-mapped). */
static int32_t utf8_decode(const unsigned char *s, size_t n, size_t *len) {
    unsigned char c = s[0];
    int extra = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    *len = 1;
    if (extra == 0) return c;
    if (extra < 0 || (size_t)extra >= n) return -1;
    int32_t cp = c & (0x3f >> extra);
    for (int k = 1; k <= extra; k++) {
        if ((s[k] & 0xc0) != 0x80) return -1;
        cp = cp << 6 | (s[k] & 0x3f);
    }
    static const int32_t min_of[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_of[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1; /* overlong, surrogate */
    *len = (size_t)extra + 1;
    return cp;
}

static size_t utf8_encode(int32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3f)), out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f)), out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

enum { CASE_NONE, CASE_LOWER, CASE_UPPER };

static int32_t change_case(int32_t cp, int change, locale_t loc) {
    if (cp < 0 || change == CASE_NONE) return cp;
    wint_t w = change == CASE_LOWER ? towlower_l((wint_t)cp, loc) : towupper_l((wint_t)cp, loc);
    return w <= 0x10ffff ? (int32_t)w : cp;
}

/* Whether a and b are equal, character by character lower-cased when fold. */
static bool text_eq(const otter_bytes *a, const otter_bytes *b, bool fold, locale_t loc) {
    if (!fold) return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
    size_t i = 0, j = 0;
    while (i < a->len && j < b->len) {
        size_t la, lb;
        int32_t x = utf8_decode((const unsigned char *)a->data + i, a->len - i, &la);
        int32_t y = utf8_decode((const unsigned char *)b->data + j, b->len - j, &lb);
        if (x < 0 || y < 0 ? x != y || a->data[i] != b->data[j]
                           : change_case(x, CASE_LOWER, loc) != change_case(y, CASE_LOWER, loc))
            return false;
        i += la, j += lb;
    }
    return i == a->len && j == b->len;
}

static void locale_release(void *p) { freelocale((locale_t)p); }

/* The node's locale (attribute `locale`, default en_US.UTF-8) for case mapping, loaded once per
 * session; where the system lacks it, glibc's built-in C.UTF-8, whose mapping is Unicode's default. */
static otter_status node_locale(ot_kernel_ctx *ctx, locale_t *loc) {
    void **slot = ot_ctx_cache(ctx, locale_release);
    if (!*slot) {
        const char *name = ot_ctx_attr_string_or(ctx, "locale", "en_US.UTF-8");
        locale_t l = newlocale(LC_CTYPE_MASK, name, (locale_t)0);
        if (!l) l = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
        if (!l) return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "neither locale '%s' nor C.UTF-8 is available", name);
        *slot = l;
    }
    *loc = (locale_t)*slot;
    return OTTER_OK;
}

/* X [C] or [1, C]: elements equal to a stopword (case-insensitively unless is_case_sensitive) are
 * removed (all removed: one empty string remains), the rest change case. */
otter_status ot_kernel_string_normalizer(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(need_strings(ctx, 0, &x));
    if (x->rank != 1 && !(x->rank == 2 && x->dims[0] == 1)) {
        char a[96];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' has shape %s, expected [C] or [1, C]",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(a, sizeof a, x->rank, x->dims));
    }
    const char *action;
    int64_t case_sensitive;
    OT_TRY(ot_ctx_attr_string(ctx, "case_change_action", &action));
    OT_TRY(ot_ctx_attr_int(ctx, "is_case_sensitive", &case_sensitive));
    int change = ot_streq(action, "LOWER") ? CASE_LOWER : ot_streq(action, "UPPER") ? CASE_UPPER : CASE_NONE;
    if (change == CASE_NONE && !ot_streq(action, "NONE"))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'case_change_action' is '%s'", action);
    locale_t loc = (locale_t)0;
    OT_TRY(node_locale(ctx, &loc));
    const otter_attr *stop = otter_node_attr(ctx->node, "stopwords");
    const otter_bytes *in = x->data;
    int64_t n = otter_tensor_numel(x), kept = 0;
    uint8_t *keep = ot_ctx_scratch(ctx, (size_t)n + 1);
    if (!keep) return OTTER_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        keep[i] = 1;
        for (size_t s = 0; stop && s < stop->n_strings && keep[i]; s++)
            if (text_eq(&in[i], &stop->strings[s], case_sensitive == 0, loc)) keep[i] = 0;
        kept += keep[i];
    }
    int64_t dims[2] = {1, kept ? kept : 1};
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_STRING, x->rank, x->rank == 1 ? dims + 1 : dims);
    if (!y) return ctx->output_status;
    otter_bytes *out = y->data;
    if (!kept) return set_string(&out[0], "", 0); /* everything removed: one empty string */
    for (int64_t i = 0, k = 0; i < n; i++) {
        if (!keep[i]) continue;
        const unsigned char *s = (const unsigned char *)in[i].data;
        char *d = ot_malloc(4 * in[i].len + 1); /* a character grows to at most 4 bytes */
        if (!d) return OT_NOMEM();
        size_t len = 0;
        for (size_t j = 0, step; j < in[i].len; j += step) {
            int32_t cp = utf8_decode(s + j, in[i].len - j, &step);
            if (cp < 0)
                d[len++] = (char)s[j];
            else
                len += utf8_encode(change_case(cp, change, loc), d + len);
        }
        d[len] = '\0';
        out[k].data = d;
        out[k].len = len;
        k++;
    }
    return OTTER_OK;
}

/* ---- StringConcat ------------------------------------------------------------------------- */

typedef struct concat_job {
    const otter_bytes *x, *y;
    otter_bytes *z;
    bool failed;
} concat_job;

static void concat_row(void *arg, const int64_t *off, const int64_t *step, int64_t len) {
    concat_job *j = arg;
    for (int64_t i = 0; i < len && !j->failed; i++) {
        const otter_bytes *a = &j->x[off[1] + i * step[1]], *b = &j->y[off[2] + i * step[2]];
        otter_bytes *z = &j->z[off[0] + i * step[0]];
        z->data = ot_malloc(a->len + b->len + 1);
        if (!z->data) {
            j->failed = true;
            return;
        }
        if (a->len) memcpy(z->data, a->data, a->len);
        if (b->len) memcpy(z->data + a->len, b->data, b->len);
        z->data[a->len + b->len] = '\0';
        z->len = a->len + b->len;
    }
}

otter_status ot_kernel_string_concat(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *y;
    OT_TRY(need_strings(ctx, 0, &x));
    OT_TRY(need_strings(ctx, 1, &y));
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(ot_broadcast_inputs(ctx, 2, (const size_t[]){0, 1}, &rank, dims));
    otter_tensor *z = ot_ctx_output(ctx, 0, OTTER_DTYPE_STRING, rank, dims);
    if (!z) return ctx->output_status;
    if (otter_tensor_numel(z) == 0) return OTTER_OK;
    ot_bcast b;
    ot_bcast_init_tensors(&b, z, 2, (const otter_tensor *const[]){x, y});
    concat_job job = {x->data, y->data, z->data, false};
    ot_bcast_walk(&b, 0, b.numel, concat_row, &job); /* one thread: allocation failures stay simple */
    return job.failed ? OT_NOMEM() : OTTER_OK;
}

/* ---- StringSplit -------------------------------------------------------------------------- */

/* Python's str.split() whitespace within ASCII (its Unicode spaces are not split on). */
static bool is_split_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

/* Substrings of s split as Python's str.split(sep, maxsplit) (sep empty: runs of whitespace,
 * stripped at both ends), each reported to emit(arg, start, length, index); returns their count.
 * maxsplit < 0: no limit. */
typedef otter_status (*split_emit_fn)(void *arg, const char *s, size_t n, int64_t index);
static otter_status split_one(const otter_bytes *str, const otter_bytes *sep, int64_t maxsplit, split_emit_fn emit,
                              void *arg, int64_t *count) {
    const char *s = str->len ? str->data : "";
    size_t n = str->len, i = 0;
    int64_t k = 0;
    if (sep->len == 0) {
        for (;;) {
            while (i < n && is_split_space((unsigned char)s[i])) i++;
            if (i == n) break;
            size_t start = i;
            if (maxsplit >= 0 && k == maxsplit) { /* the rest, trailing whitespace kept */
                i = n;
            } else {
                while (i < n && !is_split_space((unsigned char)s[i])) i++;
            }
            if (emit) OT_TRY(emit(arg, s + start, i - start, k));
            k++;
        }
    } else {
        for (;;) {
            size_t end = n;
            if (maxsplit < 0 || k < maxsplit)
                for (size_t p = i; p + sep->len <= n; p++)
                    if (memcmp(s + p, sep->data, sep->len) == 0) {
                        end = p;
                        break;
                    }
            if (emit) OT_TRY(emit(arg, s + i, end - i, k));
            k++;
            if (end == n) break;
            i = end + sep->len;
        }
    }
    *count = k;
    return OTTER_OK;
}

typedef struct split_out {
    otter_bytes *row; /* this input element's substrings */
} split_out;

static otter_status split_store(void *arg, const char *s, size_t n, int64_t index) {
    split_out *o = arg;
    return set_string(&o->row[index], s, n);
}

otter_status ot_kernel_string_split(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(need_strings(ctx, 0, &x));
    if (x->rank >= OTTER_MAX_RANK)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input 0 '%s' has rank %d; the output needs one more",
                            ot_ctx_input_name(ctx, 0), x->rank);
    const char *delimiter = ot_ctx_attr_string_or(ctx, "delimiter", "");
    otter_bytes sep = {(char *)delimiter, strlen(delimiter)};
    int64_t maxsplit = ot_ctx_attr_int_or(ctx, "maxsplit", -1);
    if (maxsplit < 0 && ot_ctx_attr_set(ctx, "maxsplit"))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'maxsplit' is %lld; it must be >= 0",
                            (long long)maxsplit);
    const otter_bytes *in = x->data;
    int64_t numel = otter_tensor_numel(x), width = 0;
    /* First pass: the substring counts (output Z) and the widest row. */
    otter_tensor *z = ot_ctx_output(ctx, 1, OTTER_DTYPE_INT64, x->rank, x->dims);
    if (!z) return ctx->output_status;
    int64_t *counts = z->data;
    for (int64_t i = 0; i < numel; i++) {
        OT_TRY(split_one(&in[i], &sep, maxsplit, NULL, NULL, &counts[i]));
        if (counts[i] > width) width = counts[i];
    }
    int64_t dims[OTTER_MAX_RANK];
    memcpy(dims, x->dims, (size_t)x->rank * sizeof *dims);
    dims[x->rank] = width;
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_STRING, x->rank + 1, dims);
    if (!y) return ctx->output_status;
    otter_bytes *out = y->data;
    for (int64_t i = 0; i < numel; i++) {
        split_out o = {out + i * width};
        int64_t k;
        OT_TRY(split_one(&in[i], &sep, maxsplit, split_store, &o, &k));
        for (; k < width; k++) OT_TRY(set_string(&o.row[k], "", 0)); /* padding */
    }
    return OTTER_OK;
}

/* ---- RegexFullMatch ----------------------------------------------------------------------- */

#ifdef OTTER_NO_PCRE2
/* The WebAssembly build has no PCRE2 (tools/build-web.sh). */
otter_status ot_kernel_regex_full_match(ot_kernel_ctx *ctx) {
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "RegexFullMatch is not in the WebAssembly build (no PCRE2)");
}
#else

/* PCRE2 allocates through otter's allocator hook. */
static void *pcre_alloc(PCRE2_SIZE n, void *unused) { return ot_malloc(n); }
static void pcre_free(void *p, void *unused) { ot_free(p); }

typedef struct regex_cache {
    pcre2_general_context *gcx;
    pcre2_code *code;
} regex_cache;

static void regex_cache_free(void *p) {
    regex_cache *c = p;
    if (!c) return;
    pcre2_code_free(c->code);
    pcre2_general_context_free(c->gcx);
    ot_free(c);
}

/* The node's pattern compiled for full matches of UTF-8 subjects: anchored at both ends, like
 * RE2::FullMatch. RE2's syntax is (for what ONNX models use) a subset of PCRE2's; PCRE2's \w, \d,
 * \b stay ASCII as in RE2 (no PCRE2_UCP). Compiled once per session: the pattern is an attribute. */
static otter_status regex_compile(ot_kernel_ctx *ctx, const regex_cache **compiled) {
    void **slot = ot_ctx_cache(ctx, regex_cache_free);
    if (*slot) {
        *compiled = *slot;
        return OTTER_OK;
    }
    const otter_attr *pattern = otter_node_attr(ctx->node, "pattern");
    if (!pattern || pattern->type != OTTER_ATTR_STRING)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "the string attribute 'pattern' is required");
    regex_cache *c = ot_calloc(1, sizeof *c);
    if (!c) return OT_NOMEM();
    c->gcx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    pcre2_compile_context *ccx = c->gcx ? pcre2_compile_context_create(c->gcx) : NULL;
    if (!ccx) {
        regex_cache_free(c);
        return OT_NOMEM();
    }
    int err;
    PCRE2_SIZE at;
    c->code = pcre2_compile((PCRE2_SPTR)pattern->s.data, pattern->s.len,
                            PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &at, ccx);
    pcre2_compile_context_free(ccx);
    if (!c->code) {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(err, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown error");
        regex_cache_free(c);
        if (err == PCRE2_ERROR_HEAP_FAILED) return OT_NOMEM();
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "attribute 'pattern' is not a valid regular expression: %s at offset %zu",
                            (const char *)msg, (size_t)at);
    }
    *slot = c;
    *compiled = c;
    return OTTER_OK;
}

otter_status ot_kernel_regex_full_match(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(need_strings(ctx, 0, &x));
    const regex_cache *re = NULL;
    OT_TRY(regex_compile(ctx, &re));
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_BOOL, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    if (n == 0) return OTTER_OK;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, re->gcx);
    if (!md) return OT_NOMEM();
    const otter_bytes *in = x->data;
    uint8_t *out = y->data;
    otter_status st = OTTER_OK;
    for (int64_t i = 0; i < n; i++) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)(in[i].len ? in[i].data : ""), in[i].len, 0, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMEMORY) {
            st = OT_NOMEM();
            break;
        }
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown error");
            st = ot_ctx_error(ctx, OTTER_ERR_INVALID, "matching element %lld of input 0 '%s': %s", (long long)i,
                              ot_ctx_input_name(ctx, 0), (const char *)msg);
            break;
        }
        out[i] = rc >= 0;
    }
    pcre2_match_data_free(md);
    return st;
}
#endif /* OTTER_NO_PCRE2 */
