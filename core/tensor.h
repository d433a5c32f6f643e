#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tutti {

// Shape of a tensor: sizes of each dimension, outermost first. A 0-dimensional
// shape is a scalar (one element).
using Shape = std::vector<int64_t>;

int64_t numElements(const Shape& shape);
// "[3, 4, 5]"
std::string shapeToString(const Shape& shape);
// Elements per row of the first dimension (product of the other dimensions;
// 1 for a 1-dimensional shape).
int64_t rowElements(const Shape& shape);

// Where a tensor's memory lives. CUDA tensors need a build with CUDA
// (tutti_built_with("cuda")).
enum class DeviceType : uint8_t { kCpu = 0, kCuda = 1 };

// A non-owning, contiguous, row-major view of tensor memory. The caller keeps
// the memory alive until the op's handle completes.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  DeviceType device = DeviceType::kCpu;
  int device_id = -1;
  // CUDA tensors: the framework's stream (a cudaStream_t; nullptr = the
  // legacy default stream) whose work queued before the enqueue produced the
  // input; tutti's own stream waits for it on the device (ops/device.h).
  void* stream = nullptr;

  int64_t numElements() const { return tutti::numElements(shape); }
  size_t numBytes() const { return static_cast<size_t>(numElements()) * dataTypeSize(dtype); }
};

// The one check of a tensor's fields, for the C API (raw integers from C) and
// the runtime (a TensorView): a known dtype and device, no negative
// dimension, and data non-null unless the tensor has no bytes. Errors are
// kInvalidArgument naming `what` ("input", "outputs[3]") and what is accepted,
// e.g. "input dtype 12 is unknown: expected a dtype in [0, 9]".
Status checkTensorFields(int dtype, int device, const Shape& shape, const void* data,
                         const std::string& what);
Status checkTensorView(const TensorView& t, const std::string& what);

// An owned, contiguous CPU tensor: the output of ops whose output size only
// the runtime knows (allgather, alltoall, reducescatter).
struct OwnedTensor {
  DataType dtype = DataType::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;

  TensorView view() { return TensorView{bytes.data(), dtype, shape}; }
};

}  // namespace tutti
