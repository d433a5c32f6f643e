// kernel_base.h: what every tutti TensorFlow kernel shares: dtype and shape
// translation, status mapping, the op's tensor name and options, and the
// asynchronous finish through the completer (completion.h).
//
// Tensors: CPU (host memory) TensorFlow tensors, contiguous as TensorFlow
// keeps them, of uint8, uint16, uint32, uint64, int8, int16, int32, int64,
// float16, bfloat16, float32, float64 or bool. Errors become TensorFlow statuses (ToStatus):
// tutti's message, with a TensorFlow code chosen by tutti's status.
#ifndef TUTTI_BINDINGS_TENSORFLOW_KERNEL_BASE_H_
#define TUTTI_BINDINGS_TENSORFLOW_KERNEL_BASE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "completion.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tutti.h"

namespace tutti_tf {

// The dtypes every collective accepts, as a REGISTER_OP type constraint.
#define TUTTI_TF_TYPES                                                                      \
  "{uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, " \
  "float64, bool}"

// tutti_dtype of a TensorFlow dtype; -1 for one tutti has no code for.
int DtypeCode(tensorflow::DataType dtype);

// TensorFlow dtype of a tutti_dtype (DT_INVALID for an unknown code).
tensorflow::DataType TfDtype(int code);

// A TensorFlow status for a tutti status and message: InvalidArgument,
// FailedPrecondition (mismatch, not initialised, as Horovod's), Unavailable
// (peer lost, I/O), Aborted (shutdown), DeadlineExceeded (timeout, stall),
// AlreadyExists (duplicate name), Internal. OK for TUTTI_OK.
absl::Status ToStatus(int status, const std::string& message);

// The view of a host tensor tutti's C API reads. `shape` keeps the sizes
// alive; it must outlive the *_async call the view is passed to.
tutti_tensor Describe(const tensorflow::Tensor& tensor, std::vector<int64_t>* shape);

// Copies the runtime-sized output of a completed handle into a new output
// `index` of ctx (its dtype and shape as tutti_handle_output says).
absl::Status CopyHandleOutput(tensorflow::OpKernelContext* ctx, int index, tutti_handle handle);

// Shape functions: every output i has input i's shape (SameShapes), or its
// shape with an unknown first dimension, the input being of rank >= 1
// (FirstDimUnknown: allgather, reducescatter, alltoall's output 0).
absl::Status SameShapes(tensorflow::shape_inference::InferenceContext* c);
absl::Status FirstDimUnknown(tensorflow::shape_inference::InferenceContext* c);

// Base of the collective kernels. Reads the optional attrs
// ignore_name_scope (bool) and process_set_id (int), as Horovod's ops, and
// compression (string, allreduce only).
class TuttiAsyncKernel : public tensorflow::AsyncOpKernel {
 public:
  explicit TuttiAsyncKernel(tensorflow::OpKernelConstruction* ctx);

 protected:
  // The name the ranks match this op by: the node's name (without its name
  // scope when ignore_name_scope is set). In graph mode node names are the
  // same on every rank; eager ops run one at a time.
  std::string TensorName() const;

  // Options for the *_async_opts calls: this op's process set and its
  // compression attr when it has one ("" = the job's default). Set once at
  // construction: concurrent runs of the kernel share it.
  const tutti_op_options* Options() const { return &options_; }

  // Checks an input's dtype has a tutti code; sets an InvalidArgument status
  // naming the input and the accepted dtypes otherwise.
  bool CheckDtype(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& t, int index);

  // Views of input i and of output i, which has its shape (the input's
  // buffer forwarded when TensorFlow allows, else newly allocated). shapes
  // keeps the views' sizes: two entries per call, it must outlive the
  // *_async call. On false, ctx's status says why (bad dtype, allocation).
  bool SameShapeOutput(tensorflow::OpKernelContext* ctx, int i, tutti_tensor* in, tutti_tensor* out,
                       std::vector<std::vector<int64_t>>* shapes);

  // After an *_async call: on TUTTI_OK returns true; else sets the status
  // (tutti's last error) and calls done, and returns false.
  static bool Enqueued(tensorflow::OpKernelContext* ctx, int rc, const DoneCallback& done);

  // Finishes the kernel once `handles` completed: on success runs
  // outputs(ctx) (which may read the handles' outputs), then releases the
  // handles, sets the status and calls done.
  static void FinishWhenDone(
      tensorflow::OpKernelContext* ctx, DoneCallback done, std::vector<tutti_handle> handles,
      std::function<absl::Status(tensorflow::OpKernelContext*)> outputs = nullptr);

  // One op per input: enqueue(view of input i, name) for each input, named
  // TensorName() (".<i>" appended when `grouped`). Stops at the first
  // failure, with ctx's status set; returns the handles enqueued until then.
  std::vector<tutti_handle> EnqueueEach(
      tensorflow::OpKernelContext* ctx, bool grouped,
      const std::function<int(const tutti_tensor&, const char*, tutti_handle*)>& enqueue);

  // Finishes a kernel whose output i is the runtime-sized output of
  // handles[i] (allgather, reducescatter). When ctx's status is already an
  // error (an enqueue after the first failed), waits for the enqueued
  // handles and finishes with that error; with no handle, calls done.
  static void FinishWithHandleOutputs(tensorflow::OpKernelContext* ctx, DoneCallback done,
                                      std::vector<tutti_handle> handles);

  int process_set_id_ = 0;

 private:
  bool ignore_name_scope_ = false;
  tutti_op_options options_{};
  std::string compression_;
};

}  // namespace tutti_tf

#endif  // TUTTI_BINDINGS_TENSORFLOW_KERNEL_BASE_H_
