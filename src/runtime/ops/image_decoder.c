/* ImageDecoder (opset 20): an encoded image (uint8 bytes) to [H, W, C] uint8 pixels.
 *
 * Each format is decoded by Debian's library for it (libjpeg-turbo, libpng, libtiff, libwebp,
 * OpenJPEG); BMP and PNM, a few fixed headers over raw rows, by the small readers below. Every
 * decoder writes 8-bit RGB; the pixel_format then picks RGB, BGR or Grayscale (Pillow's "L"
 * conversion, which ONNX's reference implementation uses: L = (19595 R + 38470 G + 7471 B +
 * 2^15) >> 16). Alpha is dropped, gray is replicated.
 *
 * The bytes are untrusted: the libraries report errors through handlers installed here (never
 * printing, never exiting: libjpeg and libpng jump back with longjmp), the image size is checked
 * against OT_IMAGE_MAX_PIXELS before any pixel buffer is allocated, and a stream that cannot be
 * decoded is an error naming the node and the reason. (The spec allows an empty output instead;
 * an error tells the user why.) */
#ifdef OTTER_NO_IMAGE_CODECS
#include "runtime/ops/kernels.h"

/* The WebAssembly build has no image libraries (tools/build-web.sh). */
otter_status ot_kernel_image_decoder(ot_kernel_ctx *ctx) {
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "ImageDecoder is not in the WebAssembly build (no image decoders)");
}
#else
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* after stdio.h and stddef.h, which jpeglib.h needs */
#include <jpeglib.h>

#include <jerror.h> /* after jpeglib.h */
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "core/core.h"
#include "runtime/ops/kernels.h"

/* 64 Mpixels (192 MiB of RGB): larger than any camera image, small enough for a device. */
#define OT_IMAGE_MAX_PIXELS ((int64_t)1 << 26)

typedef struct image {
    int64_t width, height;
    uint8_t *rgb;  /* [height][width][3], ot_malloc'd */
    char err[200]; /* why decoding failed */
    bool nomem;    /* because an allocation failed */
} image;

static bool image_fail(image *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool image_fail(image *im, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(im->err, sizeof im->err, fmt, ap);
    va_end(ap);
    return false;
}

static bool image_size_ok(image *im, int64_t width, int64_t height) {
    if (width <= 0 || height <= 0 || width > OT_IMAGE_MAX_PIXELS || height > OT_IMAGE_MAX_PIXELS ||
        width * height > OT_IMAGE_MAX_PIXELS)
        return image_fail(im, "image size %lld x %lld is empty or above the limit of %lld pixels", (long long)width,
                          (long long)height, (long long)OT_IMAGE_MAX_PIXELS);
    return true;
}

/* An allocation failed: the error is OTTER_ERR_NOMEM, not a corrupt stream. */
static bool image_nomem(image *im) {
    im->nomem = true;
    return image_fail(im, "out of memory");
}

/* Sets the size and allocates the RGB buffer, after checking the size. */
static bool image_alloc(image *im, int64_t width, int64_t height) {
    if (!image_size_ok(im, width, height)) return false;
    im->width = width;
    im->height = height;
    im->rgb = ot_malloc((size_t)(width * height * 3));
    return im->rgb ? true : image_nomem(im);
}

static void image_release(image *im) {
    ot_free(im->rgb);
    im->rgb = NULL;
}

/* ---- JPEG (libjpeg-turbo) --------------------------------------------------------------------- */

typedef struct jpeg_errors {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    image *im;
} jpeg_errors;

static void jpeg_fail(j_common_ptr c) {
    jpeg_errors *e = (jpeg_errors *)c->err;
    char msg[JMSG_LENGTH_MAX];
    c->err->format_message(c, msg);
    image_fail(e->im, "%s", msg);
    longjmp(e->jump, 1);
}

/* Warnings are not printed; a truncated stream (which libjpeg would fill with gray) is an error. */
static void jpeg_message(j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(c);
}

static bool decode_jpeg(const uint8_t *p, size_t n, image *im) {
    struct jpeg_decompress_struct cinfo;
    jpeg_errors errors = {.im = im};
    cinfo.err = jpeg_std_error(&errors.pub);
    errors.pub.error_exit = jpeg_fail;
    errors.pub.emit_message = jpeg_message;
    if (setjmp(errors.jump)) {
        jpeg_destroy_decompress(&cinfo);
        image_release(im);
        return false;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, p, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = JCS_RGB; /* default DCT and fancy upsampling: the spec's chroma upsampling */
    if (!image_alloc(im, cinfo.image_width, cinfo.image_height)) {
        jpeg_destroy_decompress(&cinfo);
        return false;
    }
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3 || (int64_t)cinfo.output_width != im->width ||
        (int64_t)cinfo.output_height != im->height) {
        jpeg_destroy_decompress(&cinfo);
        image_release(im);
        return image_fail(im, "unexpected decoded layout");
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = im->rgb + (size_t)cinfo.output_scanline * (size_t)im->width * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return true;
}

/* ---- PNG (libpng) ----------------------------------------------------------------------------- */

typedef struct mem_reader {
    const uint8_t *p;
    size_t n, at;
} mem_reader;

static void png_fail(png_structp png, png_const_charp msg) {
    image_fail(png_get_error_ptr(png), "%s", msg);
    png_longjmp(png, 1);
}
static void png_quiet(png_structp png, png_const_charp msg) {}

static void png_read_mem(png_structp png, png_bytep out, size_t n) {
    mem_reader *r = png_get_io_ptr(png);
    if (n > r->n - r->at) png_error(png, "truncated stream");
    memcpy(out, r->p + r->at, n);
    r->at += n;
}

static bool decode_png(const uint8_t *p, size_t n, image *im) {
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, im, png_fail, png_quiet);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return image_nomem(im);
    }
    mem_reader reader = {p, n, 0};
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        ot_free(rows);
        image_release(im);
        return false;
    }
    png_set_read_fn(png, &reader, png_read_mem);
    png_set_user_limits(png, (png_uint_32)OT_IMAGE_MAX_PIXELS, (png_uint_32)OT_IMAGE_MAX_PIXELS);
    png_read_info(png, info);
    int depth = png_get_bit_depth(png, info), color = png_get_color_type(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    if (!(color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (!image_alloc(im, png_get_image_width(png, info), png_get_image_height(png, info))) png_longjmp(png, 1);
    if (png_get_rowbytes(png, info) != (size_t)im->width * 3) png_error(png, "unexpected decoded layout");
    rows = ot_malloc((size_t)im->height * sizeof *rows);
    if (!rows) {
        image_nomem(im);
        png_longjmp(png, 1);
    }
    for (int64_t y = 0; y < im->height; y++) rows[y] = im->rgb + (size_t)(y * im->width * 3);
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    ot_free(rows);
    return true;
}

/* ---- TIFF (libtiff) --------------------------------------------------------------------------- */

static tmsize_t tiff_read(thandle_t h, void *out, tmsize_t n) {
    mem_reader *r = (mem_reader *)h;
    size_t left = r->n - r->at, k = n < 0 ? 0 : (size_t)n < left ? (size_t)n : left;
    memcpy(out, r->p + r->at, k);
    r->at += k;
    return (tmsize_t)k;
}
static tmsize_t tiff_write(thandle_t h, void *in, tmsize_t n) { return -1; }
static toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
    mem_reader *r = (mem_reader *)h;
    uint64_t base = whence == SEEK_CUR ? r->at : whence == SEEK_END ? r->n : 0;
    if (off > r->n - base) return (toff_t)-1; /* only positions inside the stream */
    r->at = (size_t)(base + off);
    return r->at;
}
static int tiff_close(thandle_t h) { return 0; }
static toff_t tiff_size(thandle_t h) { return ((mem_reader *)h)->n; }
static int tiff_map(thandle_t h, void **base, toff_t *size) { return 0; }
static void tiff_unmap(thandle_t h, void *base, toff_t size) {}

static int tiff_error(TIFF *t, void *user, const char *module, const char *fmt, va_list ap) {
    image *im = user;
    if (!im->err[0]) vsnprintf(im->err, sizeof im->err, fmt, ap); /* the first error is the cause */
    return 1;                                                     /* handled: libtiff prints nothing */
}
static int tiff_warning(TIFF *t, void *user, const char *module, const char *fmt, va_list ap) { return 1; }

static bool decode_tiff(const uint8_t *p, size_t n, image *im) {
    TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
    if (!opts) return image_nomem(im);
    TIFFOpenOptionsSetErrorHandlerExtR(opts, tiff_error, im);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, tiff_warning, NULL);
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, OT_IMAGE_MAX_PIXELS * 4);
    mem_reader reader = {p, n, 0};
    TIFF *t = TIFFClientOpenExt("image", "rm", (thandle_t)&reader, tiff_read, tiff_write, tiff_seek, tiff_close,
                                tiff_size, tiff_map, tiff_unmap, opts);
    TIFFOpenOptionsFree(opts);
    if (!t) return im->err[0] ? false : image_fail(im, "not a readable TIFF stream");
    uint32_t w = 0, h = 0;
    TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h);
    uint32_t *raster = NULL;
    bool ok = image_alloc(im, w, h) && (raster = ot_malloc((size_t)w * h * sizeof *raster)) != NULL;
    if (im->rgb && !raster) image_nomem(im);
    /* Every photometric interpretation to 8-bit RGBA, top row first; stop at the first error. */
    if (ok && !TIFFReadRGBAImageOriented(t, w, h, raster, ORIENTATION_TOPLEFT, 1)) {
        if (!im->err[0]) image_fail(im, "cannot read the pixels");
        ok = false;
    }
    for (size_t i = 0; ok && i < (size_t)w * h; i++) {
        im->rgb[3 * i] = (uint8_t)TIFFGetR(raster[i]);
        im->rgb[3 * i + 1] = (uint8_t)TIFFGetG(raster[i]);
        im->rgb[3 * i + 2] = (uint8_t)TIFFGetB(raster[i]);
    }
    ot_free(raster);
    TIFFClose(t);
    if (!ok) image_release(im);
    return ok;
}

/* ---- WebP (libwebp) --------------------------------------------------------------------------- */

static bool decode_webp(const uint8_t *p, size_t n, image *im) {
    int w, h;
    if (!WebPGetInfo(p, n, &w, &h)) return image_fail(im, "not a decodable WebP stream");
    if (!image_alloc(im, w, h)) return false;
    size_t size = (size_t)im->width * (size_t)im->height * 3;
    if (!WebPDecodeRGBInto(p, n, im->rgb, size, w * 3)) {
        image_release(im);
        return image_fail(im, "corrupt WebP stream");
    }
    return true;
}

/* ---- JPEG 2000 (OpenJPEG) --------------------------------------------------------------------- */

static OPJ_SIZE_T opj_read_mem(void *out, OPJ_SIZE_T n, void *user) {
    mem_reader *r = user;
    size_t left = r->n - r->at, k = n < left ? n : left;
    if (k == 0) return (OPJ_SIZE_T)-1; /* end of stream */
    memcpy(out, r->p + r->at, k);
    r->at += k;
    return k;
}
static OPJ_OFF_T opj_skip_mem(OPJ_OFF_T n, void *user) {
    mem_reader *r = user;
    if (n < 0 || (uint64_t)n > r->n - r->at) return -1;
    r->at += (size_t)n;
    return n;
}
static OPJ_BOOL opj_seek_mem(OPJ_OFF_T off, void *user) {
    mem_reader *r = user;
    if (off < 0 || (uint64_t)off > r->n) return OPJ_FALSE;
    r->at = (size_t)off;
    return OPJ_TRUE;
}
static void opj_error(const char *msg, void *user) {
    image *im = user;
    if (!im->err[0]) {
        image_fail(im, "%s", msg);
        size_t k = strlen(im->err);
        if (k && im->err[k - 1] == '\n') im->err[k - 1] = '\0';
    }
}
static void opj_quiet(const char *msg, void *user) {}

/* Component sample v of precision prec (signed or not) as 8 bits. */
static uint8_t opj_sample8(const opj_image_comp_t *c, int32_t v) {
    if (c->sgnd) v += 1 << (c->prec - 1);
    if (c->prec > 8)
        v >>= c->prec - 8;
    else if (c->prec < 8)
        v = (int32_t)(((int64_t)v * 255) / ((1 << c->prec) - 1));
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static bool decode_jpeg2000(const uint8_t *p, size_t n, image *im, bool jp2_box) {
    mem_reader reader = {p, n, 0};
    opj_codec_t *codec = opj_create_decompress(jp2_box ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
    opj_stream_t *stream = opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE);
    opj_image_t *img = NULL;
    bool ok = codec && stream;
    if (!ok) image_nomem(im);
    if (ok) {
        opj_set_error_handler(codec, opj_error, im);
        opj_set_warning_handler(codec, opj_quiet, NULL);
        opj_set_info_handler(codec, opj_quiet, NULL);
        opj_dparameters_t params;
        opj_set_default_decoder_parameters(&params);
        opj_stream_set_user_data(stream, &reader, NULL);
        opj_stream_set_user_data_length(stream, n);
        opj_stream_set_read_function(stream, opj_read_mem);
        opj_stream_set_skip_function(stream, opj_skip_mem);
        opj_stream_set_seek_function(stream, opj_seek_mem);
        ok = opj_setup_decoder(codec, &params) && opj_read_header(stream, codec, &img);
    }
    /* The size check comes before opj_decode allocates the components. */
    int64_t w = ok ? (int64_t)img->x1 - img->x0 : 0, h = ok ? (int64_t)img->y1 - img->y0 : 0;
    ok = ok && image_alloc(im, w, h) && opj_decode(codec, stream, img) && opj_end_decompress(codec, stream);
    if (ok && img->numcomps == 0) ok = image_fail(im, "no components");
    for (unsigned c = 0; ok && c < (img->numcomps < 3 ? 1 : 3); c++) {
        const opj_image_comp_t *k = &img->comps[c];
        if (!k->data || k->w != (OPJ_UINT32)w || k->h != (OPJ_UINT32)h || k->prec < 1 || k->prec > 31)
            ok = image_fail(im, "subsampled or malformed component %u", c);
    }
    if (ok && img->color_space == OPJ_CLRSPC_SYCC) ok = image_fail(im, "YCC color space is not supported");
    for (int64_t i = 0; ok && i < w * h; i++)
        for (int ch = 0; ch < 3; ch++) {
            const opj_image_comp_t *k = &img->comps[img->numcomps < 3 ? 0 : ch];
            im->rgb[3 * i + ch] = opj_sample8(k, k->data[i]);
        }
    if (!ok && !im->err[0]) image_fail(im, "corrupt JPEG 2000 stream");
    if (img) opj_image_destroy(img);
    if (stream) opj_stream_destroy(stream);
    if (codec) opj_destroy_codec(codec);
    if (!ok) image_release(im);
    return ok;
}

/* ---- BMP: uncompressed (1/4/8-bit palette, 16/24/32-bit) and BI_BITFIELDS rows ------------- */

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

/* Channel value under mask scaled to 8 bits. */
static uint8_t mask8(uint32_t px, uint32_t mask) {
    if (!mask) return 0;
    int shift = 0, bits = 0;
    while (!(mask >> shift & 1)) shift++;
    while (shift + bits < 32 && mask >> (shift + bits) & 1) bits++;
    uint32_t v = (px & mask) >> shift, max = bits >= 32 ? UINT32_MAX : (1u << bits) - 1;
    return (uint8_t)(((uint64_t)v * 255 + max / 2) / max);
}

static bool decode_bmp(const uint8_t *p, size_t n, image *im) {
    if (n < 26) return image_fail(im, "truncated BMP header");
    uint32_t data_at = le32(p + 10), hdr = le32(p + 14);
    int64_t w, h;
    uint32_t bpp, compression = 0, colors = 0, masks[3] = {0};
    if (hdr == 12) { /* BITMAPCOREHEADER */
        w = le16(p + 18);
        h = (int16_t)le16(p + 20);
        bpp = le16(p + 24);
    } else if (hdr >= 40 && n >= 14 + (size_t)hdr) {
        w = (int32_t)le32(p + 18);
        h = (int32_t)le32(p + 22);
        bpp = le16(p + 28);
        compression = le32(p + 30);
        colors = le32(p + 46);
        size_t mask_at = 14 + 40; /* masks follow a 40-byte header, or sit inside a longer one */
        if (compression == 3 && mask_at + 12 <= n)
            for (int k = 0; k < 3; k++) masks[k] = le32(p + mask_at + 4 * k);
    } else {
        return image_fail(im, "unsupported BMP header of %u bytes", hdr);
    }
    bool top_down = h < 0;
    if (top_down) h = -h;
    if (compression == 3 && bpp != 16 && bpp != 32) return image_fail(im, "BI_BITFIELDS with %u bits per pixel", bpp);
    if (compression != 0 && compression != 3)
        return image_fail(im, "compressed BMP (method %u) is not supported", compression);
    if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
        return image_fail(im, "%u bits per pixel", bpp);
    if (compression == 0 && bpp == 16) { /* 5-5-5 */
        masks[0] = 0x7c00;
        masks[1] = 0x03e0;
        masks[2] = 0x001f;
    }
    if (!image_size_ok(im, w, h)) return false;
    size_t stride = (size_t)((w * bpp + 31) / 32) * 4;
    const uint8_t *palette = p + 14 + hdr;
    size_t entry = hdr == 12 ? 3 : 4, n_colors = bpp <= 8 ? (colors ? colors : 1u << bpp) : 0;
    if (n_colors > 256 || (bpp <= 8 && (size_t)(palette - p) + n_colors * entry > n))
        return image_fail(im, "bad BMP palette");
    if (data_at > n || (size_t)h > (n - data_at) / stride) return image_fail(im, "truncated BMP pixel data");
    if (!image_alloc(im, w, h)) return false;
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *row = p + data_at + stride * (size_t)(top_down ? y : h - 1 - y);
        uint8_t *out = im->rgb + (size_t)(y * w * 3);
        for (int64_t x = 0; x < w; x++, out += 3) {
            if (bpp <= 8) {
                size_t bit = (size_t)x * bpp;
                uint32_t idx = (row[bit / 8] >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1);
                if (idx >= n_colors) idx = 0; /* out-of-palette indices read entry 0 */
                const uint8_t *c = palette + idx * entry;
                out[0] = c[2], out[1] = c[1], out[2] = c[0];
            } else if (bpp == 24 || (bpp == 32 && compression == 0)) {
                const uint8_t *c = row + (size_t)x * (bpp / 8);
                out[0] = c[2], out[1] = c[1], out[2] = c[0];
            } else {
                uint32_t px = bpp == 16 ? le16(row + 2 * x) : le32(row + 4 * x);
                for (int k = 0; k < 3; k++) out[k] = mask8(px, masks[k]);
            }
        }
    }
    return true;
}

/* ---- PNM: P1-P6 (ASCII and binary bitmaps, graymaps, pixmaps) -------------------------------- */

typedef struct pnm_reader {
    const uint8_t *p;
    size_t n, at;
} pnm_reader;

/* Next decimal number, skipping whitespace and # comments; -1 at a malformed or missing one. */
static int64_t pnm_number(pnm_reader *r) {
    for (;;) {
        while (r->at < r->n && (r->p[r->at] == ' ' || (r->p[r->at] >= '\t' && r->p[r->at] <= '\r'))) r->at++;
        if (r->at < r->n && r->p[r->at] == '#')
            while (r->at < r->n && r->p[r->at] != '\n') r->at++;
        else
            break;
    }
    if (r->at >= r->n || r->p[r->at] < '0' || r->p[r->at] > '9') return -1;
    int64_t v = 0;
    while (r->at < r->n && r->p[r->at] >= '0' && r->p[r->at] <= '9') {
        v = v * 10 + (r->p[r->at++] - '0');
        if (v > (int64_t)1 << 32) return -1;
    }
    return v;
}

static bool decode_pnm(const uint8_t *p, size_t n, image *im) {
    int kind = p[1] - '0'; /* 1, 4: bitmap; 2, 5: graymap; 3, 6: pixmap */
    pnm_reader r = {p, n, 2};
    int64_t w = pnm_number(&r), h = pnm_number(&r), maxval = kind == 1 || kind == 4 ? 1 : pnm_number(&r);
    if (w < 0 || h < 0 || maxval < 1 || maxval > 65535) return image_fail(im, "malformed PNM header");
    if (!image_alloc(im, w, h)) return false;
    bool ascii = kind <= 3;
    int channels = kind == 3 || kind == 6 ? 3 : 1, bytes = maxval > 255 ? 2 : 1;
    if (!ascii) r.at++;          /* the single whitespace byte before the raster */
    size_t row_bits = (size_t)w; /* P4: rows are padded to whole bytes */
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            uint8_t v8[3];
            for (int c = 0; c < channels; c++) {
                int64_t v;
                if (ascii) {
                    v = kind == 1 ? -1 : pnm_number(&r);
                    if (kind == 1) { /* P1 digits need no separators */
                        while (r.at < n && p[r.at] != '0' && p[r.at] != '1') {
                            if (p[r.at] == '#')
                                while (r.at < n && p[r.at] != '\n') r.at++;
                            else
                                r.at++;
                        }
                        if (r.at < n) v = p[r.at++] - '0';
                    }
                } else if (kind == 4) {
                    size_t byte = (size_t)y * ((row_bits + 7) / 8) + (size_t)x / 8;
                    v = r.at + byte < n ? (p[r.at + byte] >> (7 - x % 8)) & 1 : -1;
                } else {
                    size_t at = r.at + ((size_t)(y * w + x) * (size_t)channels + (size_t)c) * (size_t)bytes;
                    v = at + (size_t)bytes <= n ? (bytes == 2 ? (int64_t)p[at] << 8 | p[at + 1] : p[at]) : -1;
                }
                if (v < 0 || v > maxval) {
                    image_release(im);
                    return image_fail(im, "truncated or malformed PNM pixel data");
                }
                /* bitmaps: 1 is black */
                v8[c] = kind == 1 || kind == 4 ? (uint8_t)(v ? 0 : 255) : (uint8_t)((v * 255 + maxval / 2) / maxval);
            }
            uint8_t *out = im->rgb + (size_t)(y * w + x) * 3;
            for (int c = 0; c < 3; c++) out[c] = v8[channels == 3 ? c : 0];
        }
    return true;
}

/* ---- the operator ----------------------------------------------------------------------------- */

typedef enum { FMT_UNKNOWN, FMT_JPEG, FMT_PNG, FMT_TIFF, FMT_WEBP, FMT_JP2, FMT_J2K, FMT_BMP, FMT_PNM } image_format;

static image_format sniff(const uint8_t *p, size_t n) {
    static const uint8_t jp2[] = {0, 0, 0, 12, 'j', 'P', ' ', ' ', '\r', '\n', 0x87, '\n'};
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return FMT_JPEG;
    if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) return FMT_PNG;
    if (n >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0)) return FMT_TIFF;
    if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) return FMT_WEBP;
    if (n >= sizeof jp2 && memcmp(p, jp2, sizeof jp2) == 0) return FMT_JP2;
    if (n >= 4 && memcmp(p, "\xff\x4f\xff\x51", 4) == 0) return FMT_J2K;
    if (n >= 2 && p[0] == 'B' && p[1] == 'M') return FMT_BMP;
    if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6') return FMT_PNM;
    return FMT_UNKNOWN;
}

static const char *const format_names[] = {"unknown",   "JPEG",      "PNG", "TIFF", "WebP",
                                           "JPEG 2000", "JPEG 2000", "BMP", "PNM"};

otter_status ot_kernel_image_decoder(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (x->dtype != OTTER_DTYPE_UINT8) return ot_ctx_bad_type(ctx, 0, x->dtype);
    const char *pixel_format = ot_ctx_attr_string_or(ctx, "pixel_format", "RGB");
    int order = ot_streq(pixel_format, "RGB")         ? 0
                : ot_streq(pixel_format, "BGR")       ? 1
                : ot_streq(pixel_format, "Grayscale") ? 2
                                                      : -1;
    if (order < 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'pixel_format' is '%s'; expected RGB, BGR or Grayscale",
                            pixel_format);
    const uint8_t *p = x->data;
    size_t n = (size_t)otter_tensor_numel(x);
    image im = {0};
    image_format fmt = sniff(p, n);
    bool ok;
    switch (fmt) {
    case FMT_JPEG:
        ok = decode_jpeg(p, n, &im);
        break;
    case FMT_PNG:
        ok = decode_png(p, n, &im);
        break;
    case FMT_TIFF:
        ok = decode_tiff(p, n, &im);
        break;
    case FMT_WEBP:
        ok = decode_webp(p, n, &im);
        break;
    case FMT_JP2:
    case FMT_J2K:
        ok = decode_jpeg2000(p, n, &im, fmt == FMT_JP2);
        break;
    case FMT_BMP:
        ok = decode_bmp(p, n, &im);
        break;
    case FMT_PNM:
        ok = decode_pnm(p, n, &im);
        break;
    default:
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input 0 '%s' (%zu bytes) is not a BMP, JPEG, JPEG 2000, PNG, PNM, TIFF or WebP image",
                            ot_ctx_input_name(ctx, 0), n);
    }
    if (!ok)
        return ot_ctx_error(ctx, im.nomem ? OTTER_ERR_NOMEM : OTTER_ERR_INVALID, "cannot decode input 0 '%s' as %s: %s",
                            ot_ctx_input_name(ctx, 0), format_names[fmt], im.err);
    int64_t channels = order == 2 ? 1 : 3;
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_UINT8, 3, (const int64_t[]){im.height, im.width, channels});
    if (!y) {
        image_release(&im);
        return ctx->output_status;
    }
    uint8_t *out = y->data;
    size_t pixels = (size_t)(im.width * im.height);
    const uint8_t *rgb = im.rgb;
    if (order == 0) {
        memcpy(out, rgb, pixels * 3);
    } else if (order == 1) {
        for (size_t i = 0; i < pixels; i++) {
            out[3 * i] = rgb[3 * i + 2];
            out[3 * i + 1] = rgb[3 * i + 1];
            out[3 * i + 2] = rgb[3 * i];
        }
    } else {
        for (size_t i = 0; i < pixels; i++)
            out[i] =
                (uint8_t)((rgb[3 * i] * 19595u + rgb[3 * i + 1] * 38470u + rgb[3 * i + 2] * 7471u + 0x8000u) >> 16);
    }
    image_release(&im);
    return OTTER_OK;
}
#endif /* OTTER_NO_IMAGE_CODECS */
