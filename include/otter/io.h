/* otter: reading and writing ONNX models and tensor files. */
#ifndef OTTER_IO_H
#define OTTER_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/ir.h"
#include "otter/runtime.h"
#include "otter/status.h"
#include "otter/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Load a ModelProto. Tensors stored as external data are read from files next to the model
 * (a location that escapes the model's folder is refused). */
OTTER_API otter_status otter_model_load(otter_model **out, const char *path);
/* From memory; base_dir resolves external data (NULL: external data is an error). */
OTTER_API otter_status otter_model_load_from_memory(otter_model **out, const void *data, size_t size,
                                                    const char *base_dir);

typedef struct otter_save_options {
    /* Write tensors of at least this many bytes as external data (0: never, unless the model would
     * exceed protobuf's 2 GiB limit, in which case the large tensors go out anyway). */
    size_t external_threshold;
    /* File name (relative to the model's folder) for external data; NULL: "<model file name>.data". */
    const char *external_file;
    /* Bring every tensor inline (tensors read from external data otherwise go back to external data). */
    bool all_inline;
} otter_save_options;

/* Write atomically (temporary file, then rename). opts may be NULL. External data never overwrites a file in
 * place: when its name is taken (say by the data the model being replaced reads), it goes to
 * "<name>.<16 hex digits>", committed before the model's rename; the superseded files go after it, so a crash
 * leaves the old pair or the new one. */
OTTER_API otter_status otter_model_save(const otter_model *m, const char *path, const otter_save_options *opts);
/* Write size bytes to path atomically: a temporary file beside it (dead writers' stale ones removed), fsync,
 * rename over path, fsync of the folder. On failure path is unchanged; the error names it. */
OTTER_API otter_status otter_write_file_atomic(const char *path, const void *data, size_t size);
/* Serialize to a buffer allocated with the library's allocator (free with otter_free). Tensors stay inline. */
OTTER_API otter_status otter_model_save_to_memory(const otter_model *m, void **data, size_t *size);

/* Tensor files: an ONNX TensorProto (.pb) or a NumPy array (.npy, format 1.0/2.0/3.0, little-endian). */
OTTER_API otter_status otter_tensor_load_pb(otter_tensor **out, const char *path);
OTTER_API otter_status otter_tensor_load_pb_from_memory(otter_tensor **out, const void *data, size_t size);
OTTER_API otter_status otter_tensor_save_pb(const otter_tensor *t, const char *path);
OTTER_API otter_status otter_tensor_load_npy(otter_tensor **out, const char *path);
OTTER_API otter_status otter_tensor_load_npy_from_memory(otter_tensor **out, const void *data, size_t size);
OTTER_API otter_status otter_tensor_save_npy(const otter_tensor *t, const char *path);
/* By extension: ".npy" or ".pb". */
OTTER_API otter_status otter_tensor_load(otter_tensor **out, const char *path);
OTTER_API otter_status otter_tensor_save(const otter_tensor *t, const char *path);

/* Value files: a run's inputs and outputs of any kind (otter_arg) as ONNX's backend tests store them. The file
 * holds the message `declared` (a graph input's or output's type) calls for: a TensorProto (or a .npy array) for
 * a tensor or when declared is NULL or untyped, onnx-data.proto's SequenceProto for seq(tensor), OptionalProto
 * for optional(tensor) or optional(seq(tensor)) (an empty one loads as OTTER_ARG_NONE; a plain tensor file is
 * accepted for optional(tensor)). Where bfloat16 is declared, a uint16 tensor is taken as bfloat16's bits (ONNX
 * 1.12's test data stores bfloat16 so). Maps, sparse tensors and sequences of non-tensors are refused as
 * OTTER_ERR_UNSUPPORTED: the runtime has no such values. Free what *out holds with otter_arg_free. */
OTTER_API otter_status otter_arg_load(otter_arg *out, const char *path, const otter_type *declared);
OTTER_API otter_status otter_arg_load_pb_from_memory(otter_arg *out, const void *data, size_t size,
                                                     const otter_type *declared);
/* Write a as a .pb: a tensor as a TensorProto, a sequence as a SequenceProto, and as an OptionalProto when
 * declared is optional(...) or a is NONE (an empty optional). declared may be NULL. Atomic, as
 * otter_model_save. */
OTTER_API otter_status otter_arg_save_pb(const otter_arg *a, const otter_type *declared, const char *path);

#ifdef __cplusplus
}
#endif
#endif
