/* im2col for convolution kernels: the one implementation behind Conv (nn.c) and ConvGrad
 * (training_nn.c), and its adjoint col2im (ConvTranspose, Col2Im). Geometry is given in 3 spatial dimensions (1-D and
 * 2-D convs lead with 1s). */
#ifndef OTTER_RUNTIME_OPS_IM2COL_H
#define OTTER_RUNTIME_OPS_IM2COL_H

#include <stdint.h>

typedef struct ot_conv_window {
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad_begin[3];
} ot_conv_window;

/* Output positions [lo, hi) along one axis whose input index off + o * stride lies in [0, in). */
void ot_conv_valid_range(int64_t off, int64_t stride, int64_t in, int64_t out, int64_t *lo, int64_t *hi);

/* col[((c * kd + z) * kh + y) * kw + x) * ld + (od, oh, ow)] = x[c][id][ih][iw], or 0 in the padding;
 * C channels of x (contiguous [C, D, H, W]); ld >= the number of output positions. */
void ot_im2col(const float *x, int64_t C, const ot_conv_window *w, float *col, int64_t ld);

/* The transpose of ot_im2col's layout: rows[p * ldr + ((c * kd + z) * kh + y) * kw + x], one row of
 * C * kd * kh * kw taps per output position p (a product's A with positions as rows); ldr >= that. */
void ot_im2col_rows(const float *x, int64_t C, const ot_conv_window *w, float *rows, int64_t ldr);

/* The adjoint of ot_im2col: x[c][id][ih][iw] += col[(c, kd, kh, kw) * ld + (od, oh, ow)] for every tap that
 * lands inside x (ConvTranspose, Col2Im); C channels of x (contiguous [C, D, H, W]). */
void ot_col2im(const float *col, int64_t C, const ot_conv_window *w, float *x, int64_t ld);

#endif
