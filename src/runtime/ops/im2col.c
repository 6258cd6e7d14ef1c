#include "runtime/ops/im2col.h"

#include <stdbool.h>
#include <string.h>

void ot_conv_valid_range(int64_t off, int64_t stride, int64_t in, int64_t out, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int64_t h = in - off <= 0 ? 0 : (in - off + stride - 1) / stride;
    if (h > out) h = out;
    if (l > h) l = h;
    *lo = l, *hi = h;
}

void ot_im2col(const float *x, int64_t C, const ot_conv_window *w, float *col, int64_t ld) {
    const int64_t D = w->in[0], H = w->in[1], W = w->in[2], OD = w->out[0], OH = w->out[1], OW = w->out[2];
    int64_t r = 0;
    for (int64_t c = 0; c < C; c++)
        for (int64_t kd = 0; kd < w->k[0]; kd++)
            for (int64_t kh = 0; kh < w->k[1]; kh++)
                for (int64_t kw = 0; kw < w->k[2]; kw++, r++) {
                    float *dst = col + r * ld;
                    int64_t offw = kw * w->dil[2] - w->pad_begin[2], wlo, whi;
                    ot_conv_valid_range(offw, w->stride[2], W, OW, &wlo, &whi);
                    for (int64_t od = 0; od < OD; od++) {
                        int64_t id = od * w->stride[0] - w->pad_begin[0] + kd * w->dil[0];
                        for (int64_t oh = 0; oh < OH; oh++) {
                            float *drow = dst + (od * OH + oh) * OW;
                            int64_t ih = oh * w->stride[1] - w->pad_begin[1] + kh * w->dil[1];
                            if (id < 0 || id >= D || ih < 0 || ih >= H) {
                                memset(drow, 0, (size_t)OW * sizeof(float));
                                continue;
                            }
                            const float *src = x + ((c * D + id) * H + ih) * W + offw;
                            for (int64_t ow = 0; ow < wlo; ow++) drow[ow] = 0.0f;
                            if (w->stride[2] == 1)
                                memcpy(drow + wlo, src + wlo, (size_t)(whi - wlo) * sizeof(float));
                            else
                                for (int64_t ow = wlo; ow < whi; ow++) drow[ow] = src[ow * w->stride[2]];
                            for (int64_t ow = whi; ow < OW; ow++) drow[ow] = 0.0f;
                        }
                    }
                }
}

void ot_im2col_rows(const float *x, int64_t C, const ot_conv_window *w, float *rows, int64_t ldr) {
    const int64_t D = w->in[0], H = w->in[1], W = w->in[2], OD = w->out[0], OH = w->out[1], OW = w->out[2];
    const int64_t KD = w->k[0], KH = w->k[1], KW = w->k[2], plane = D * H * W;
    for (int64_t od = 0; od < OD; od++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float *dst = rows + ((od * OH + oh) * OW + ow) * ldr;
                const int64_t id0 = od * w->stride[0] - w->pad_begin[0], ih0 = oh * w->stride[1] - w->pad_begin[1],
                              iw0 = ow * w->stride[2] - w->pad_begin[2];
                for (int64_t kd = 0; kd < KD; kd++) {
                    const int64_t id = id0 + kd * w->dil[0];
                    for (int64_t kh = 0; kh < KH; kh++) {
                        const int64_t ih = ih0 + kh * w->dil[1];
                        const bool row_in = id >= 0 && id < D && ih >= 0 && ih < H;
                        /* the taps (c, kd, kh, .) of every channel c: KW floats, channels K / C apart */
                        float *d = dst + kd * KH * KW + kh * KW;
                        const float *src = x + (id * H + ih) * W;
                        for (int64_t kw = 0; kw < KW; kw++) {
                            const int64_t iw = iw0 + kw * w->dil[2];
                            if (row_in && iw >= 0 && iw < W)
                                for (int64_t c = 0; c < C; c++) d[c * KD * KH * KW + kw] = src[c * plane + iw];
                            else
                                for (int64_t c = 0; c < C; c++) d[c * KD * KH * KW + kw] = 0.0f;
                        }
                    }
                }
            }
}

void ot_col2im(const float *col, int64_t C, const ot_conv_window *w, float *x, int64_t ld) {
    const int64_t D = w->in[0], H = w->in[1], W = w->in[2], OD = w->out[0], OH = w->out[1], OW = w->out[2];
    int64_t r = 0;
    for (int64_t c = 0; c < C; c++)
        for (int64_t kd = 0; kd < w->k[0]; kd++)
            for (int64_t kh = 0; kh < w->k[1]; kh++)
                for (int64_t kw = 0; kw < w->k[2]; kw++, r++) {
                    const float *src = col + r * ld;
                    int64_t offw = kw * w->dil[2] - w->pad_begin[2], wlo, whi;
                    ot_conv_valid_range(offw, w->stride[2], W, OW, &wlo, &whi);
                    for (int64_t od = 0; od < OD; od++) {
                        int64_t id = od * w->stride[0] - w->pad_begin[0] + kd * w->dil[0];
                        if (id < 0 || id >= D) continue;
                        for (int64_t oh = 0; oh < OH; oh++) {
                            int64_t ih = oh * w->stride[1] - w->pad_begin[1] + kh * w->dil[1];
                            if (ih < 0 || ih >= H) continue;
                            const float *srow = src + (od * OH + oh) * OW;
                            float *dst = x + ((c * D + id) * H + ih) * W + offw;
                            for (int64_t ow = wlo; ow < whi; ow++) dst[ow * w->stride[2]] += srow[ow];
                        }
                    }
                }
}
