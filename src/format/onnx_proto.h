/* Conversion between protobuf-c's generated ONNX structs and otter's own model and tensors.
 * Only src/format/ sees protobuf structs; everything above works on otter_model / otter_tensor. */
#ifndef OTTER_FORMAT_ONNX_PROTO_H
#define OTTER_FORMAT_ONNX_PROTO_H

#include <protobuf-c/protobuf-c.h>

#include "onnx.pb-c.h"
#include "otter/ir.h"
#include "otter/tensor.h"

/* protobuf-c allocator routed through otter's allocator hook. */
extern ProtobufCAllocator ot_protobuf_allocator;

/* A TensorProto into an otter tensor. base_dir resolves external data (NULL: external data is an
 * error). Checks data_type, dims and that the data holds exactly the elements the dims need.
 * The tensor takes over p's raw_data buffer (p must come from an unpack with ot_protobuf_allocator;
 * its raw_data is left empty). */
otter_status ot_tensor_from_proto(otter_tensor **out, Onnx__TensorProto *p, const char *base_dir);

/* Serialize an otter tensor as a TensorProto with inline data (raw_data unless the tensor was read
 * from typed fields) into a buffer the caller frees with ot_free. */
otter_status ot_tensor_pack(const otter_tensor *t, void **data, size_t *size);

#endif
