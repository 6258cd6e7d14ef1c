/* Shape rule of ImageDecoder (runtime/ops/image_decoder.c). */
#include <string.h>

#include "infer/infer_internal.h"

/* encoded bytes -> [H, W, C] uint8: H and W depend on the data; C is 1 for Grayscale, else 3 */
otter_status ot_infer_image_decoder(ot_inode *n) {
    const char *format = ot_attr_str(n, "pixel_format", "RGB");
    ot_idim d[3] = {OT_DIM_UNKNOWN, OT_DIM_UNKNOWN, ot_dim_known(strcmp(format, "Grayscale") == 0 ? 1 : 3)};
    return ot_out_shape(n, 0, OTTER_DTYPE_UINT8, 3, d);
}
