#pragma once

// Error-feedback residuals (coordinator/compressor_set.h) as bytes, so that
// a binding can keep them with the rest of a committed training state
// (tutti_get/set_compression_residuals in bindings/c/tutti.h; Python's
// TorchState). Residuals are rank-local: each rank saves and restores its
// own; they are never broadcast.
//
// Format (little-endian, the host's float32):
//   "TRES" u32 version=1 u32 n_specs
//   n_specs x { u32 len, spec bytes, u32 n_tensors,
//               n_tensors x { u32 len, name bytes, u64 count, count x float32 } }
// Specs and tensor names in byte order, so equal residuals give equal bytes.
// Pure functions; thread-safe.

#include <cstdint>
#include <vector>

#include "coordinator/compressor_set.h"
#include "core/status.h"

namespace tutti {

std::vector<uint8_t> encodeResiduals(const CompressionResiduals& residuals);

// kInvalidArgument naming what is wrong (magic, version, a length past the
// end, trailing bytes); *out is unchanged then.
Status decodeResiduals(const uint8_t* data, size_t size, CompressionResiduals* out);

}  // namespace tutti
